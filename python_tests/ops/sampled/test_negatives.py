"""sample_negatives / sample_negatives_batched: exact complement sampling, determinism, uniformity, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy import special, stats

import fedkernels
from python_tests.reference import sampled_ref
from python_tests.support.helpers import csr_from_lists


@st.composite
def positives_and_m(draw):
    p = draw(st.integers(1, 400))
    pos = draw(st.lists(st.integers(0, p - 1), max_size=30))  # duplicates allowed
    k = len(sampled_ref.complement(pos, p))
    m = draw(st.one_of(st.just(k), st.just(0), st.integers(0, k)))  # m = |complement| and m = 0 included
    return p, pos, m


@given(data=positives_and_m(), seed=st.integers(-(2**63), 2**63 - 1))
def test_draws_distinct_sorted_negatives(data, seed):
    p, pos, m = data
    got = fedkernels.sample_negatives(torch.tensor(pos, dtype=torch.int64), p, m, seed)
    assert got.dtype == torch.int64 and got.shape == (m,)
    vals = got.tolist()
    assert vals == sorted(set(vals))  # distinct, ascending
    assert set(vals) <= set(sampled_ref.complement(pos, p))  # negatives only
    again = fedkernels.sample_negatives(torch.tensor(pos[::-1], dtype=torch.int64), p, m, seed)
    assert torch.equal(got, again)  # a function of the positive *set* and the seed


def test_m_equal_to_complement_takes_all():
    pos = [0, 3, 3, 9]
    got = fedkernels.sample_negatives(torch.tensor(pos), 10, 7, seed=5)
    assert got.tolist() == sampled_ref.complement(pos, 10)


def test_huge_class_ids_do_not_cost_num_classes():
    num_classes = 2**62
    pos = torch.tensor([0, 5, 2**62 - 1, 2**40, 2**40])
    got = fedkernels.sample_negatives(pos, num_classes, 1000, seed=11)
    assert got.shape == (1000,) and int(got.min()) >= 0 and int(got.max()) < num_classes
    assert not set(got.tolist()) & set(pos.tolist())
    assert len(set(got.tolist())) == 1000


def test_seed_changes_the_draw():
    pos = torch.tensor([1, 2])
    a = fedkernels.sample_negatives(pos, 10_000, 50, seed=1)
    b = fedkernels.sample_negatives(pos, 10_000, 50, seed=2)
    assert not torch.equal(a, b)


@given(
    rows=st.lists(st.lists(st.integers(0, 59), max_size=10), max_size=6),
    m=st.integers(0, 40),
    seed=st.integers(0, 2**63 - 1),
)
def test_batched_rows_equal_single_client_with_derived_seed(rows, m, seed):
    indptr, indices = csr_from_lists(rows)
    got = fedkernels.sample_negatives_batched(indptr, indices, 60, m, seed)
    assert got.shape == (len(rows), m)
    for c, pos in enumerate(rows):
        want = fedkernels.sample_negatives(
            torch.tensor(pos, dtype=torch.int64), 60, m, fedkernels.negatives_seed(seed, c)
        )
        assert torch.equal(got[c], want)


def test_negatives_seed_is_a_valid_distinct_seed():
    seeds = {fedkernels.negatives_seed(7, c) for c in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)


def test_uniform_over_the_complement_chi_square():
    # 20000 clients with the same positives, fixed seed: each class of the complement must be hit
    # equally often (chi-square against uniform), and the m-th order statistic must not be skewed.
    num_classes, m, clients = 50, 5, 20000
    pos = [0, 7, 7, 13, 21, 22, 23, 40, 49]
    comp = sampled_ref.complement(pos, num_classes)
    indptr = torch.arange(clients + 1, dtype=torch.int64) * len(pos)
    indices = torch.tensor(pos * clients, dtype=torch.int64)
    draws = fedkernels.sample_negatives_batched(indptr, indices, num_classes, m, seed=2024)
    counts = torch.bincount(draws.reshape(-1), minlength=num_classes).numpy()
    assert counts[pos].sum() == 0
    observed = counts[comp]
    _, p_value = stats.chisquare(observed, np.full(len(comp), clients * m / len(comp)))
    assert p_value > 1e-3, (p_value, observed)
    # joint, not just marginal: the smallest of a uniform m-subset of K items is the a-th with
    # probability C(K - a - 1, m - 1) / C(K, m)
    k = len(comp)
    mins = np.bincount([comp.index(v) for v in draws[:, 0].tolist()], minlength=k)
    p_min = np.array([special.comb(k - a - 1, m - 1) / special.comb(k, m) for a in range(k)])
    keep = p_min * clients >= 5
    expected = p_min[keep] / p_min[keep].sum() * mins[keep].sum()
    _, p_value = stats.chisquare(mins[keep], expected)
    assert p_value > 1e-3, p_value


def test_single_client_uniform_chi_square():
    num_classes, m = 30, 3
    pos = torch.tensor([2, 4, 8, 16])
    counts = np.zeros(num_classes)
    for seed in range(3000):
        counts[fedkernels.sample_negatives(pos, num_classes, m, seed).numpy()] += 1
    comp = sampled_ref.complement(pos.tolist(), num_classes)
    assert counts[pos.numpy()].sum() == 0
    _, p_value = stats.chisquare(counts[comp], np.full(len(comp), 3000 * m / len(comp)))
    assert p_value > 1e-3


def test_on_device(device):
    pos = torch.tensor([1, 4, 4, 90], device=device)
    got = fedkernels.sample_negatives(pos, 100, 20, seed=3)
    want = fedkernels.sample_negatives(pos.cpu(), 100, 20, seed=3)
    assert got.device.type == device and torch.equal(got.cpu(), want)  # the same draws on every device
    indptr, indices = csr_from_lists([[1, 2], [], [99]], device)
    got_b = fedkernels.sample_negatives_batched(indptr, indices, 100, 10, seed=4)
    assert torch.equal(got_b.cpu(), fedkernels.sample_negatives_batched(indptr.cpu(), indices.cpu(), 100, 10, 4))


def test_empty_inputs():
    assert fedkernels.sample_negatives(torch.zeros(0, dtype=torch.int64), 0, 0, 1).shape == (0,)
    assert fedkernels.sample_negatives(torch.zeros(0, dtype=torch.int64), 5, 5, 1).tolist() == [0, 1, 2, 3, 4]
    out = fedkernels.sample_negatives_batched(
        torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 10, 3, 1
    )
    assert out.shape == (0, 3)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((torch.tensor([0, 1, 2]), 5, 3, 0), ValueError, "too few classes"),
        ((torch.tensor([0, 0, 0]), 5, 5, 0), ValueError, "too few classes"),
        ((torch.tensor([0, 5]), 5, 1, 0), IndexError, "positives"),
        ((torch.tensor([-1]), 5, 1, 0), IndexError, "positives"),
        ((torch.tensor([0.0]), 5, 1, 0), ValueError, "positives"),
        ((torch.tensor([[0]]), 5, 1, 0), ValueError, "positives"),
        ((torch.tensor([0]), 5, -1, 0), ValueError, "m must"),
        ((torch.tensor([0]), -5, 1, 0), ValueError, "num_classes"),
    ],
)
def test_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.sample_negatives(*args)


@pytest.mark.parametrize(
    "indptr, indices, exc, match",
    [
        ([0, 2, 3], [1, 2, 60], IndexError, "indices"),
        ([0, 2, 2], [1, 2, 3], ValueError, "indptr"),
        ([0, 3, 2], [1, 2, 3], ValueError, "indptr"),
        ([0, 2, 3], [0, 1, 2, 3], ValueError, "indptr"),
    ],
)
def test_batched_bad_input(indptr, indices, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.sample_negatives_batched(torch.tensor(indptr), torch.tensor(indices), 60, 4, 0)


def test_batched_too_few_names_the_problem():
    indptr, indices = csr_from_lists([[0], list(range(8))])
    with pytest.raises(ValueError, match="too few classes"):
        fedkernels.sample_negatives_batched(indptr, indices, 10, 3, 0)


def test_opcheck_and_compile():
    args = (torch.tensor([3, 1, 3]), 40, 6, 9)
    torch.library.opcheck(torch.ops.fedkernels.sample_negatives.default, args)
    indptr, indices = csr_from_lists([[1, 2], [3]])
    torch.library.opcheck(torch.ops.fedkernels.sample_negatives_batched.default, (indptr, indices, 40, 6, 9))
    compiled = torch.compile(fedkernels.sample_negatives, fullgraph=True)
    assert torch.equal(compiled(*args), fedkernels.sample_negatives(*args))


def test_deterministic_across_threads():
    g = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 5000, (int(k),), generator=g).tolist() for k in torch.randint(0, 50, (300,), generator=g)]
    indptr, indices = csr_from_lists(rows)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = fedkernels.sample_negatives_batched(indptr, indices, 5000, 64, 77)
        torch.set_num_threads(max(2, old))
        b = fedkernels.sample_negatives_batched(indptr, indices, 5000, 64, 77)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(a, b)
