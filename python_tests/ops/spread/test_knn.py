"""knn_classes against the brute-force [C, C] reference: ties, duplicates, dtypes, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import spread_ref


def _matrix(kind: str, c: int, d: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "gauss":
        W = torch.randn(c, d, generator=g, dtype=torch.float64)
    elif kind == "ints":  # small integers: many exactly equal distances
        W = torch.randint(-2, 3, (c, d), generator=g).to(torch.float64)
    else:  # duplicated rows: distance 0 ties between distinct classes
        base = torch.randn(max(1, c // 3), d, generator=g, dtype=torch.float64)
        W = base[torch.randint(0, base.shape[0], (c,), generator=g)]
    return W.to(dtype)


def _check_against_reference(W: torch.Tensor, k: int, metric: str) -> None:
    dist, idx = fedkernels.knn_classes(W, k, metric)
    want_d, want_i = spread_ref.knn(W.cpu(), k, metric)
    assert idx.dtype == torch.int64 and idx.shape == (W.shape[0], k)
    assert dist.dtype == (torch.float64 if W.dtype == torch.float64 else torch.float32)
    assert torch.equal(idx.cpu(), want_i)
    tol = 1e-12 if W.dtype == torch.float64 else 1e-6
    torch.testing.assert_close(dist.cpu().double(), want_d, rtol=tol, atol=tol)


@given(
    c=st.integers(2, 70),
    d=st.integers(1, 12),
    data=st.data(),
    kind=st.sampled_from(["gauss", "ints", "dups"]),
    metric=st.sampled_from(["l2", "cosine"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_matches_brute_force(c, d, data, kind, metric, dtype, seed):
    k = data.draw(st.integers(0, c - 1))
    _check_against_reference(_matrix(kind, c, d, seed, dtype), k, metric)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_half_inputs(dtype, metric):
    _check_against_reference(_matrix("gauss", 300, 24, 3, dtype), 7, metric)


@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_several_tiles_with_ties(metric):
    # C > the CPU row tile (128) and column tile (1024); integer data gives many ties across tiles.
    _check_against_reference(_matrix("ints", 2100, 6, 11, torch.float32), 12, metric)


def test_more_duplicates_than_candidate_slack():
    # 80 copies of one vector: its k = 60 nearest are the other copies, smallest ids first.
    g = torch.Generator().manual_seed(5)
    W = torch.randn(400, 16, generator=g)
    W[::5] = W[0]
    _check_against_reference(W, 60, "l2")


def test_zero_rows_cosine():
    W = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.0, 0.0], [-1.0, 0.0]])
    _check_against_reference(W, 3, "cosine")


def test_on_device(device):
    W = _matrix("gauss", 500, 32, 1, torch.float32).to(device)
    for metric in ("l2", "cosine"):
        dist, idx = fedkernels.knn_classes(W, 10, metric)
        want_d, want_i = spread_ref.knn(W.cpu(), 10, metric)
        assert dist.device.type == device and torch.equal(idx.cpu(), want_i)
        torch.testing.assert_close(dist.cpu().double(), want_d, rtol=1e-6, atol=1e-6)


def test_never_self():
    W = torch.zeros(50, 4)  # all classes coincide: self must still be excluded
    _, idx = fedkernels.knn_classes(W, 49)
    assert not (idx == torch.arange(50)[:, None]).any()
    assert torch.equal(idx[0], torch.arange(1, 50)) and torch.equal(idx[7, :7], torch.arange(7))


@pytest.mark.parametrize("c, k", [(0, 0), (1, 0), (5, 0)])
def test_empty(c, k):
    dist, idx = fedkernels.knn_classes(torch.randn(c, 3), k)
    assert dist.shape == (c, 0) and idx.shape == (c, 0)


def test_k_equals_c_minus_one():
    _check_against_reference(_matrix("gauss", 9, 3, 2, torch.float32), 8, "l2")


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((torch.randn(5, 3), 5), ValueError, "k must be < C"),
        ((torch.randn(5, 3), 9), ValueError, "k must be < C"),
        ((torch.randn(0, 3), 1), ValueError, "k must be < C"),
        ((torch.randn(5, 3), -1), ValueError, "k must be >= 0"),
        ((torch.randn(5, 3), 2, "manhattan"), ValueError, "metric"),
        ((torch.randn(5), 2), ValueError, "W must be 2-D"),
        ((torch.randint(0, 3, (5, 3)), 2), ValueError, "W must be"),
        ((torch.tensor([[0.0, float("nan")], [1.0, 2.0], [3.0, 4.0]]), 1), ValueError, "W must be finite"),
        ((torch.tensor([[0.0, float("inf")], [1.0, 2.0], [3.0, 4.0]]), 1), ValueError, "W must be finite"),
    ],
)
def test_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.knn_classes(*args)


def test_non_contiguous_input():
    W = _matrix("gauss", 60, 10, 4, torch.float32)
    Wt = W.T.contiguous().T  # same values, column-major strides
    assert not Wt.is_contiguous()
    a, b = fedkernels.knn_classes(W, 5), fedkernels.knn_classes(Wt, 5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_parameters_that_require_grad():
    """Class embeddings are a model's parameter (requires_grad): the same neighbours as the detached
    matrix (the CUDA launcher's GEMM once refused it: mm_out with an input that requires grad)."""
    W = _matrix("gauss", 60, 10, 5, torch.float32)
    a = fedkernels.knn_classes(torch.nn.Parameter(W.clone()), 5)
    b = fedkernels.knn_classes(W, 5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_opcheck_and_compile():
    W = _matrix("gauss", 40, 8, 0, torch.float32)
    torch.library.opcheck(torch.ops.fedkernels.knn_classes.default, (W, 5, "cosine"))
    compiled = torch.compile(lambda w: fedkernels.knn_classes(w, 5), fullgraph=True)
    got, want = compiled(W), fedkernels.knn_classes(W, 5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def assert_knn_thread_invariant(W: torch.Tensor, k: int = 10) -> None:
    """knn_classes gives the same bits on 1 thread as on 2 or more."""
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = fedkernels.knn_classes(W, k)
        torch.set_num_threads(max(2, old))
        b = fedkernels.knn_classes(W, k)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_deterministic_across_threads():
    assert_knn_thread_invariant(_matrix("gauss", 3000, 32, 7, torch.float32))
