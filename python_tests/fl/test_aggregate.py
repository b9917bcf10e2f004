"""Server aggregation on the compiled ops, against the float64 loops of reference/aggregate_ref.py
(FedSS's Algorithm 1 row update against the paper's line 12 written out)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.fl.aggregate import weighted_average, weighted_rows_mean, weighted_rows_update
from fedkernels.fl.algorithms.fedavg import weighted_average as fedavg_weighted_average
from python_tests.reference import aggregate_ref

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _states(seed: int, k: int, shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{f"t{i}": torch.randn(s, generator=g).to(dtype) for i, s in enumerate(shapes)} for _ in range(k)]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.integers(1, 6),
    shapes=st.lists(st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple), min_size=1, max_size=4),
    weights=st.lists(st.sampled_from([0.0, 1.0, 2.5, 7.0, 1000.0]), min_size=6, max_size=6),
    dtype=st.sampled_from(DTYPES),
)
def test_weighted_average_matches_reference(seed, k, shapes, weights, dtype):
    w = weights[:k]
    if sum(w) == 0:
        w[0] = 1.0
    states = _states(seed, k, shapes, dtype)
    got = weighted_average(states, w)
    want = aggregate_ref.weighted_average(states, w)
    assert list(got) == list(states[0])
    for name, t in got.items():
        assert t.dtype == dtype and t.shape == states[0][name].shape
        torch.testing.assert_close(t.double(), want[name], rtol=TOL[dtype], atol=TOL[dtype])


def test_weighted_average_is_deterministic_and_leaves_inputs():
    states = _states(3, 5, [(40, 7), (7,)], torch.float32)
    before = [{n: t.clone() for n, t in s.items()} for s in states]
    a = weighted_average(states, [3.0, 1.0, 4.0, 1.0, 5.0])
    b = weighted_average(states, [3.0, 1.0, 4.0, 1.0, 5.0])
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert all(torch.equal(s[n], o[n]) for s, o in zip(states, before, strict=True) for n in s)


def test_one_client_returns_its_state_and_fedavg_reexports():
    (s,) = _states(1, 1, [(3, 2)], torch.float32)
    assert torch.equal(weighted_average([s], [5.0])["t0"], s["t0"])
    assert fedavg_weighted_average is weighted_average


@pytest.mark.parametrize(
    ("states", "weights", "match"),
    [
        ([], [], "states"),
        ([{"a": torch.ones(1)}], [0.0], "weights"),
        ([{"a": torch.ones(1)}], [-1.0], "weights"),
        ([{"a": torch.ones(1)}], [float("nan")], "weights"),
        ([{"a": torch.ones(1)}], [1.0, 2.0], "weights"),
        ([{"a": torch.ones(1)}, {"b": torch.ones(1)}], [1.0, 1.0], "states\\[1\\]"),
        ([{"a": torch.ones(1, dtype=torch.int64)}], [1.0], "floating"),
        ([{"a": torch.ones(2)}, {"a": torch.ones(3)}], [1.0, 1.0], "shape"),
    ],
)
def test_weighted_average_bad_input(states, weights, match):
    with pytest.raises(ValueError, match=match):
        weighted_average(states, weights)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 12),
    d=st.integers(1, 5),
    counts=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    weights=st.lists(st.sampled_from([0.0, 1.0, 3.0, 10.0]), min_size=5, max_size=5),
)
def test_weighted_rows_mean_matches_reference(seed, n, d, counts, weights):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(n, d, generator=g)
    ids = [torch.randint(0, n, (c,), generator=g) for c in counts]
    rows = [torch.randn(c, d, generator=g) for c in counts]
    w = weights[: len(counts)]
    got = weighted_rows_mean(table, ids, rows, w)
    want = aggregate_ref.weighted_rows_mean(table, ids, rows, w)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    sent = {r for i, wk in zip(ids, w, strict=True) if wk > 0 for r in i.tolist()}
    untouched = [r for r in range(n) if r not in sent]
    assert torch.equal(got[untouched], table[untouched])  # same bits


def test_weighted_rows_mean_bad_input():
    with pytest.raises(ValueError, match="one entry per client"):
        weighted_rows_mean(torch.zeros(2, 2), [torch.tensor([0])], [], [1.0])


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 12),
    d=st.integers(1, 5),
    counts=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    weights=st.lists(st.sampled_from([0.0, 1.0, 3.0, 10.0]), min_size=5, max_size=5),
    distinct=st.booleans(),
)
def test_weighted_rows_update_is_algorithm_1(seed, n, d, counts, weights, distinct):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(n, d, generator=g)
    if distinct:  # what honest FedSS clients send (their requests are unique)
        ids = [torch.randperm(n, generator=g)[: min(c, n)] for c in counts]
    else:
        ids = [torch.randint(0, n, (c,), generator=g) for c in counts]
    rows = [torch.randn(i.numel(), d, generator=g) for i in ids]
    w = weights[: len(counts)]
    got = weighted_rows_update(table, ids, rows, w)
    want = aggregate_ref.weighted_rows_update(table, ids, rows, w)
    assert got.dtype == table.dtype and got.shape == table.shape
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    sent = {r for i, wk in zip(ids, w, strict=True) if wk > 0 for r in i.tolist()}
    untouched = [r for r in range(n) if r not in sent]
    assert torch.equal(got[untouched], table[untouched])  # same bits


def test_weighted_rows_update_against_the_senders_mean():
    # row 0 sent by both clients, row 1 by the first (weight 1 of 4), row 2 by nobody
    table = torch.zeros(3, 2)
    ids = [torch.tensor([0, 1]), torch.tensor([0])]
    rows = [torch.tensor([[4.0, 4.0], [8.0, 8.0]]), torch.tensor([[0.0, 0.0]])]
    got = weighted_rows_update(table, ids, rows, [1.0, 3.0])
    torch.testing.assert_close(got, torch.tensor([[1.0, 1.0], [2.0, 2.0], [0.0, 0.0]]))
    mean = weighted_rows_mean(table, ids, rows, [1.0, 3.0])  # the senders' rule moves row 1 all the way
    torch.testing.assert_close(mean, torch.tensor([[1.0, 1.0], [8.0, 8.0], [0.0, 0.0]]))
    # every client sends every row: the two rules agree
    full = [torch.tensor([0, 1, 2]), torch.tensor([2, 0, 1])]
    src = [torch.randn(3, 2, generator=torch.Generator().manual_seed(s)) for s in (1, 2)]
    torch.testing.assert_close(
        weighted_rows_update(table, full, src, [1.0, 3.0]), weighted_rows_mean(table, full, src, [1.0, 3.0])
    )


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (([torch.tensor([0])], [], [1.0]), ValueError, "one entry per client"),
        (([torch.tensor([0])], [torch.ones(1, 2)], [-1.0]), ValueError, "weights"),
        (([torch.tensor([0])], [torch.ones(1, 2)], [float("inf")]), ValueError, "weights"),
        (([torch.tensor([5])], [torch.ones(1, 2)], [1.0]), IndexError, "must lie in"),
    ],
)
def test_weighted_rows_update_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        weighted_rows_update(torch.zeros(2, 2), *args)


def test_weighted_rows_update_no_weight_moves_nothing():
    table = torch.randn(4, 3)
    got = weighted_rows_update(table, [torch.tensor([1, 2])], [torch.ones(2, 3)], [0.0])
    assert torch.equal(got, table)
