"""Every op with a per-level CPU path (csrc/common/cpu_isa.h) at each CPU level this process can run.

Where the levels run the same arithmetic in the same order, the outputs must be the same bits:
count_sketch and bucket_merge's backward (adds and sign flips), scatter_rows_mean (lane-wise
multiply, add and divide), prox_tv1d (the same scalar scan), delta_norms on float16 (an exact
conversion, then the same sums), knn_classes (float64 final pass; python_tests/ops/spread/test_knn_*.py),
linear_topk (one fused multiply-add chain per score in the same order on every level) and
linear_cross_entropy between avx512 and avx2 (the same 16 lanes and exp). Where they do not
(linear_cross_entropy's generic level: std::exp and a sequential sum instead of the vector exp and
16 lane sums), each level is checked against the float64 reference. A level this CPU (or
FK_CPU_ISA) does not allow is skipped with the reason.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.ops.sampled.test_lce import assert_close_scaled
from python_tests.reference import sampled_ref, sketch_ref
from python_tests.support.cpu_levels import at_level

pytestmark = pytest.mark.cpu_path("the CPU kernels' dispatch levels")

VECTOR_LEVELS = ["avx2", "avx512"]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8) if t.is_floating_point() else t


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    """The same bits (NaN payloads included), not just equal values."""
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(_bits(a), _bits(b))


@pytest.mark.parametrize("level", VECTOR_LEVELS)
@settings(max_examples=6, deadline=None)
@given(
    rows=st.sampled_from([1, 3, 16, 37]),
    p=st.integers(1, 3000),
    buckets=st.sampled_from([7, 64, 65, 1000, 9000]),  # below, in and above the wide pass's range
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_count_sketch_and_merge_backward_levels_bit_identical(level, rows, p, buckets, dtype, seed):
    hf = HashFamily(3, buckets, seed=seed % 1000)
    table, signs = hf.table(p), hf.signs(p)
    x = torch.randn(rows, p, dtype=dtype, generator=torch.Generator().manual_seed(seed))

    def run():
        g = torch.Generator().manual_seed(seed)
        logp = torch.randn(3, rows, buckets, dtype=dtype, generator=g).requires_grad_()
        fedkernels.bucket_merge(logp, table).backward(x)
        return fedkernels.count_sketch(x, table, signs, buckets), logp.grad

    with at_level("generic"):
        want = run()
    with at_level(level):
        got = run()
    for g, w in zip(got, want, strict=True):
        _same(g, w)
    ref = sketch_ref.count_sketch(x.double(), table, signs, buckets)
    torch.testing.assert_close(got[0].double(), ref, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-4)


@pytest.mark.parametrize("level", VECTOR_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n, t, d", [(50, 200, 37), (2048, 4096, 1024)])  # the second streams its 8 MiB output
def test_scatter_rows_mean_levels_bit_identical(level, dtype, n, t, d):
    g = torch.Generator().manual_seed(n + d)
    idx = torch.randint(0, n, (t,), generator=g)
    src = torch.randn(t, d, dtype=dtype, generator=g)
    weight = torch.rand(t, dtype=dtype, generator=g) * 3
    base = torch.randn(n, d, dtype=dtype, generator=g)
    with at_level("generic"):
        want = fedkernels.scatter_rows_mean(base.clone(), idx, src, weight)
    with at_level(level):
        got = fedkernels.scatter_rows_mean(base.clone(), idx, src, weight)
    _same(got, want)


@pytest.mark.parametrize("level", VECTOR_LEVELS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lam", [0.01, 1.0, 100.0])
def test_prox_tv1d_levels_bit_identical(level, dtype, lam):
    g = torch.Generator().manual_seed(3)
    z = torch.cat([torch.randn(4, 3000, generator=g), torch.randn(4, 3000, generator=g).cumsum(1)]).to(dtype)
    with at_level("generic"):
        want = fedkernels.prox_tv1d(z, lam)
    with at_level(level):
        got = fedkernels.prox_tv1d(z, lam)
    _same(got, want)


@pytest.mark.parametrize("level", VECTOR_LEVELS)
def test_delta_norms_half_levels_bit_identical(level):
    g = torch.Generator().manual_seed(5)
    new = [torch.randn(n, generator=g).half() for n in (1, 7, 8191, 20000)]
    old = [t + torch.randn(t.shape, generator=g).half() * 0.01 for t in new]
    with at_level("generic"):
        want = fedkernels.delta_norms(new, old)
    with at_level(level):
        got = fedkernels.delta_norms(new, old)
    _same(got, want)
    ref = torch.stack([(a.double() - b.double()).norm() for a, b in zip(new, old, strict=True)]).float()
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=0)


def _lce_outputs(h, W, target, b, chunk):
    loss, lse = fedkernels.linear_cross_entropy(h, W, target, b, reduction="none", chunk_size=chunk, return_lse=True)
    leaves = [t.clone().requires_grad_() for t in (h, W, b)]
    fedkernels.linear_cross_entropy(*leaves[:2], target, leaves[2], chunk_size=chunk).backward()
    return [loss, lse] + [t.grad for t in leaves]


def _lce_case(s: int):
    g = torch.Generator().manual_seed(s)
    h = torch.randn(70, 8, generator=g) * 10
    W = torch.randn(s, 8, generator=g)
    b = torch.randn(s, generator=g)
    b[::7] = float("-inf")
    target = torch.randint(0, s, (70,), generator=g)
    target[target % 7 == 0] = 1 % s  # no masked class as a target
    return h, W, target, b


LCE_SHAPES = [(300, 37), (256, 64), (5, 0), (1000, 0)]  # chunk tails, whole vectors, under one vector


@pytest.mark.parametrize("level", ["generic", "avx2", "avx512"])
@pytest.mark.parametrize("s, chunk", LCE_SHAPES)
def test_lce_each_level_matches_reference(level, s, chunk):
    h, W, target, b = _lce_case(s)
    ref_in = [t.double().requires_grad_() for t in (h, W, b)]
    ref_loss, ref_lse = sampled_ref.linear_cross_entropy(*ref_in[:2], target, ref_in[2], reduction="none")
    ref_loss.mean().backward()
    ref = [ref_loss.detach(), ref_lse.detach()] + [t.grad for t in ref_in]
    with at_level(level):
        got = _lce_outputs(h, W, target, b, chunk)
    for g, w in zip(got, ref, strict=True):
        assert_close_scaled(g, w)


@pytest.mark.parametrize("s, chunk", LCE_SHAPES)
def test_lce_avx2_bit_identical_to_avx512(s, chunk):
    h, W, target, b = _lce_case(s)
    with at_level("avx512"):
        want = _lce_outputs(h, W, target, b, chunk)
    with at_level("avx2"):
        got = _lce_outputs(h, W, target, b, chunk)
    for g, w in zip(got, want, strict=True):
        _same(g, w)


@pytest.mark.parametrize("level", VECTOR_LEVELS)
@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 14),  # whole and partial 6-row micro-panels
    p=st.integers(1, 200),  # odd and even counts of 16-class panels, a partial last panel
    d=st.sampled_from([1, 3, 8, 17, 64]),
    k=st.integers(1, 8),
    bias=st.booleans(),
    special=st.sampled_from(["none", "ties", "nan", "inf"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_linear_topk_levels_bit_identical(level, n, p, d, k, bias, special, seed):
    """The avx2 tile (6 x 16) and the avx512 one (6 x 32; the avx2 tile for an odd last panel) return the
    generic level's values and classes bit for bit, ties to the smaller class and NaN included."""
    g = torch.Generator().manual_seed(seed)
    h, W = torch.randn(n, d, generator=g), torch.randn(p, d, generator=g)
    b = torch.randn(p, generator=g) if bias else None
    if special == "ties" and p > 1:
        W[p - 1] = W[0]  # the same scores in the first and the last panel
    elif special == "nan":
        W[p // 2, 0] = float("nan")
    elif special == "inf":
        h[0, 0] = float("inf")
    k = min(k, p)
    with at_level("generic"):
        want = fedkernels.linear_topk(h, W, b, k=k, scale=0.75)
    with at_level(level):
        got = fedkernels.linear_topk(h, W, b, k=k, scale=0.75)
    for x, y in zip(got, want, strict=True):
        _same(x, y)
