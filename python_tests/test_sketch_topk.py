"""bucket_merge_topk: the fused top-k against sort of the reference scores."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import sketch_ref
from python_tests.sketch_strategies import assert_same, bucket_scores, merge_problems, with_threads


def _check(logp, table, k, reduce):
    values, indices = fedkernels.bucket_merge_topk(logp, table, k, reduce)
    want_v, want_i = sketch_ref.bucket_merge_topk(logp.cpu(), table.cpu(), k, reduce)
    assert indices.dtype == torch.int64
    assert_same(values, want_v)
    assert torch.equal(indices.cpu(), want_i)


@given(prob=merge_problems(), k_frac=st.floats(0, 1))
def test_matches_reference(prob, k_frac):
    hf = HashFamily(prob["r"], prob["b"], prob["seed"])
    table = hf.table(prob["p"])
    logp = bucket_scores((prob["r"], prob["n"], prob["b"]), prob["dtype"], prob["seed"], prob["ties"], prob["specials"])
    _check(logp, table, round(k_frac * prob["p"]), prob["reduce"])


@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 40), r=st.integers(1, 5),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]), ties=st.booleans())
def test_many_classes_exercise_pruning(seed, k, r, dtype, ties):
    # p >> k, so the heap fills early and most classes go through the exact bound test.
    hf = HashFamily(r, 300, seed)
    logp = bucket_scores((r, 3, 300), dtype, seed, ties=ties)
    _check(logp, hf.table(5000), k, "mean")


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_on_device(device, reduce):
    hf = HashFamily(4, 250, seed=3)
    logp = bucket_scores((4, 6, 250), torch.float32, 1, specials=True)
    _check(logp.to(device), hf.table(3993, device=device), 10, reduce)


def test_nan_counts_as_largest_like_torch_topk():
    # class ids 0..3 in bucket ids 0..3 of a single table; NaN at classes 1 and 3.
    logp = torch.tensor([[[0.5, float("nan"), 2.0, float("nan")]]])
    table = torch.arange(4, dtype=torch.int32).view(4, 1)
    values, indices = fedkernels.bucket_merge_topk(logp, table, 3, "mean")
    assert indices.tolist() == [[1, 3, 2]]
    assert values[0, :2].isnan().all() and values[0, 2] == 2.0
    tv, ti = torch.topk(logp[0], 3)
    assert tv[0, :2].isnan().all() and sorted(ti[0, :2].tolist()) == [1, 3] and ti[0, 2] == 2


def test_ties_go_to_smaller_class():
    logp = torch.zeros(2, 1, 5)
    table = torch.tensor([[0, 0], [1, 1], [2, 2], [3, 3], [4, 4], [0, 0]], dtype=torch.int32)
    _, indices = fedkernels.bucket_merge_topk(logp, table, 6, "mean")
    assert indices.tolist() == [[0, 1, 2, 3, 4, 5]]


def test_k_edges():
    hf = HashFamily(3, 10, seed=1)
    logp, table = bucket_scores((3, 4, 10), torch.float32, 0), hf.table(25)
    v, i = fedkernels.bucket_merge_topk(logp, table, 0)
    assert v.shape == (4, 0) and i.shape == (4, 0)
    _check(logp, table, 25, "mean")  # k = p
    _check(logp, table, 25, "median")
    v, i = fedkernels.bucket_merge_topk(torch.zeros(3, 0, 10), table, 5)
    assert v.shape == (0, 5) and i.shape == (0, 5)


@pytest.mark.parametrize("k, match", [(26, "k must be <="), (-1, "k must be >= 0")])
def test_bad_k(k, match):
    hf = HashFamily(3, 10, seed=1)
    with pytest.raises(ValueError, match=match):
        fedkernels.bucket_merge_topk(torch.zeros(3, 2, 10), hf.table(25), k)


@pytest.mark.parametrize("args, exc, match", [
    ((torch.zeros(3, 2, 10, dtype=torch.int32), 2, "mean"), ValueError, "logp"),
    ((torch.zeros(2, 2, 10), 2, "mean"), ValueError, "logp"),
    ((torch.zeros(3, 2, 9), 2, "mean"), IndexError, "table"),
    ((torch.zeros(3, 2, 10), 2, "avg"), ValueError, "reduce"),
])
def test_bad_input(args, exc, match):
    hf = HashFamily(3, 10, seed=1)
    logp, k, reduce = args
    with pytest.raises(exc, match=match):
        fedkernels.bucket_merge_topk(logp, hf.table(25), k, reduce)


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_opcheck(reduce):
    hf = HashFamily(3, 9, seed=5)
    torch.library.opcheck(torch.ops.fedkernels.bucket_merge_topk.default, (torch.randn(3, 4, 9), hf.table(30), 7, reduce))


def test_compile_fullgraph():
    hf = HashFamily(4, 100, seed=6)
    logp, table = bucket_scores((4, 5, 100), torch.float32, 2), hf.table(1000)

    def predict(lp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fedkernels.bucket_merge_topk(torch.nn.functional.logsigmoid(lp), table, 8, "mean")

    compiled = torch.compile(predict, fullgraph=True)
    got_v, got_i = compiled(logp)
    want_v, want_i = predict(logp)
    assert_same(got_v, want_v)
    assert torch.equal(got_i, want_i)


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_deterministic_across_threads(reduce):
    hf = HashFamily(4, 1000, seed=2)
    logp, table = bucket_scores((4, 64, 1000), torch.float32, 3, ties=True), hf.table(30938)
    a = with_threads(1, lambda: fedkernels.bucket_merge_topk(logp, table, 20, reduce))
    b = with_threads(2, lambda: fedkernels.bucket_merge_topk(logp, table, 20, reduce))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
