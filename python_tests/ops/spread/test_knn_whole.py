"""knn_classes' whole-matrix CPU path (C <= 2048 and C * d <= 2^22 at the avx512 and avx2 levels: W packed
once, 128-row blocks run as jobs of one parallel region, diagonal blocks filled by vector selection, the
final pass in groups of four candidates reusing mutual pairs' distances) against the brute-force reference
and, bit for bit, against the block-pair rounds of the large-C path (forced by FEDKERNELS_KNN_TILED), the
other fused level and the generic level's BLAS tiles. Shapes cross the 128-row blocks, the 16-lane vectors
and the list capacities (k + 8 up to 16, 16 for k = 9 and 10, up to 32, and above: the scalar insertion).
A level this CPU (or FK_CPU_ISA) does not allow is skipped.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import spread_ref
from python_tests.support.cpu_levels import at_level, process_level

pytestmark = pytest.mark.cpu_path("the CPU whole-matrix, tiled and BLAS paths of knn_classes")

PATHS = ["whole", "tiled", "generic"]  # whole / tiled: at `level`; generic: the BLAS tiles


def _knn(
    W: torch.Tensor, k: int, metric: str, path: str, threads: int = 1, level: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    old = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp, at_level("generic" if path == "generic" else level or process_level()):
        mp.delenv("FEDKERNELS_KNN_TILED", raising=False)  # a fresh patch per hypothesis example
        if path == "tiled":
            mp.setenv("FEDKERNELS_KNN_TILED", "1")
        try:
            torch.set_num_threads(threads)
            return fedkernels.knn_classes(W, k, metric)
        finally:
            torch.set_num_threads(old)


def _matrix(kind: str, c: int, d: int, seed: int, scale: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "ints":  # small integers: many exactly equal distances
        return torch.randint(-2, 3, (c, d), generator=g).float()
    W = torch.randn(c, d, generator=g) * scale
    if kind == "dups":  # copies of a few rows spread over all blocks: distance-0 ties, overflowing lists
        W = W[torch.randint(0, max(1, c // 5), (c,), generator=g)]
    elif kind == "zeros":  # zero rows: cosine's non-unit formula
        W[:: max(2, c // 7)] = 0.0
    elif kind == "hubs":  # a few short rows are everyone's l2 neighbours (lopsided lists)
        W[:: max(2, c // 9)] *= 1e-2
    return W


def _assert_same(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]) -> None:
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])


@settings(max_examples=25, deadline=None)
@given(
    c=st.sampled_from([2, 17, 127, 128, 129, 255, 256, 257, 300, 513]),
    d=st.integers(1, 70),
    kind=st.sampled_from(["gauss", "ints", "dups", "zeros", "hubs"]),
    metric=st.sampled_from(["l2", "cosine"]),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_whole_path_matches_reference_and_other_paths(c, d, kind, metric, scale, seed, data):
    ks = sorted({1, min(8, c - 1), min(9, c - 1), min(10, c - 1), min(24, c - 1), min(25, c - 1), c - 1})
    k = data.draw(st.sampled_from([k for k in ks if k >= 1] or [0]), label="k")
    W = _matrix(kind, c, d, seed, scale)
    whole = _knn(W, k, metric, "whole")
    want_d, want_i = spread_ref.knn(W, k, metric)
    assert torch.equal(whole[1], want_i)
    torch.testing.assert_close(whole[0].double(), want_d, rtol=1e-6, atol=1e-6)
    _assert_same(whole, _knn(W, k, metric, "tiled"))
    _assert_same(whole, _knn(W, k, metric, "generic"))


@pytest.mark.parametrize("level", ["avx2", "avx512"])
@settings(max_examples=10, deadline=None)
@given(
    c=st.sampled_from([17, 128, 129, 300, 513, 2100]),
    d=st.integers(1, 70),
    kind=st.sampled_from(["gauss", "ints", "dups", "zeros", "hubs"]),
    metric=st.sampled_from(["l2", "cosine"]),
    k=st.sampled_from([1, 9, 10, 16]),
    seed=st.integers(0, 2**31 - 1),
)
def test_each_fused_level_matches_generic(level, c, d, kind, metric, k, seed):
    # each fused level on both schedules (whole matrix, and rounds: C = 2100 or forced), bit for bit
    # with the generic level's BLAS tiles and scalar final pass
    W = _matrix(kind, c, d, seed, 1.0)
    generic = _knn(W, k, metric, "generic")
    _assert_same(_knn(W, k, metric, "whole", level=level), generic)
    _assert_same(_knn(W, k, metric, "tiled", level=level, threads=2), generic)


@settings(max_examples=10, deadline=None)
@given(
    c=st.integers(129, 1100),
    d=st.sampled_from([3, 16, 33, 64, 130]),
    k=st.sampled_from([1, 5, 10, 17, 30]),
    metric=st.sampled_from(["l2", "cosine"]),
    kind=st.sampled_from(["gauss", "dups", "hubs"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_whole_path_thread_invariant(c, d, k, metric, kind, seed):
    # 2 threads claim block pairs and final passes in a timing-dependent order; the bits must not move
    W = _matrix(kind, c, d, seed, 1.0)
    one = _knn(W, k, metric, "whole", threads=1)
    _assert_same(one, _knn(W, k, metric, "whole", threads=2))
    _assert_same(one, _knn(W, k, metric, "tiled", threads=2))


@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_bench_shape_matches_tiled_path(metric):
    # the benchmark's small-C configuration: 8 blocks, k = 10 (one-vector lists), d = 512
    W = torch.randn(1000, 512, generator=torch.Generator().manual_seed(0)) / 512**0.5
    whole = _knn(W, 10, metric, "whole", threads=2)
    _assert_same(whole, _knn(W, 10, metric, "tiled", threads=1))


def test_k_is_c_minus_one_over_blocks():
    W = _matrix("gauss", 300, 7, 3, 1.0)
    whole = _knn(W, 299, "l2", "whole")
    want_d, want_i = spread_ref.knn(W, 299, "l2")
    assert torch.equal(whole[1], want_i)
    torch.testing.assert_close(whole[0].double(), want_d, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_is_an_error_on_every_path(dtype, bad):
    # the whole path finds NaN/inf through the row norms; float64 (whose squares can overflow) by ATen
    W = torch.randn(600, 40, dtype=torch.float64).to(dtype)
    W[517, 39] = bad
    for path in PATHS:
        with pytest.raises(ValueError, match="W must be finite"):
            _knn(W, 10, "cosine", path)


def test_finite_float64_with_overflowing_norm_is_accepted():
    # float64 entries near 1e200: finite, so no error, although their squares overflow
    W = torch.randn(40, 6, dtype=torch.float64)
    W[3] = 1e200
    _, idx = fedkernels.knn_classes(W, 3, "cosine")
    assert idx.shape == (40, 3) and not (idx == torch.arange(40)[:, None]).any()
