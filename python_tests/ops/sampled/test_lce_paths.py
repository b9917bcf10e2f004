"""linear_cross_entropy's CPU paths: the fused forward+gradient path and the row kernels of each CPU
level (avx512, avx2: vector exp, bit-identical to each other; generic: the scalar math).

Each is checked against the dense float64 reference (python_tests/reference/sampled_ref.py) and
against the other CPU paths; a level this CPU (or FK_CPU_ISA) does not allow is skipped.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests.ops.sampled.test_lce import assert_close_scaled
from python_tests.reference import sampled_ref
from python_tests.support.cpu_levels import at_level
from python_tests.support.op_errors import raw_op_raises


def _inputs(n, d, s, seed, dtype=torch.float32, bias=True, ignore_index=-100, ignored=0.0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=dtype)
    W = torch.randn(s, d, generator=g, dtype=dtype)
    b = torch.randn(s, generator=g, dtype=dtype) if bias else None
    target = torch.randint(0, s, (n,), generator=g)
    target[torch.rand(n, generator=g) < ignored] = ignore_index
    return h, W, target, b


def _fused_and_reference(h, W, target, b, upstream, **kw):
    leaves = [t.clone().requires_grad_() for t in (h, W) + ((b,) if b is not None else ())]
    loss = fedkernels.linear_cross_entropy(leaves[0], leaves[1], target, leaves[2] if b is not None else None, **kw)
    assert type(loss.grad_fn).__name__ == "_FusedLinearCrossEntropyBackward"  # the path under test
    (loss * upstream).backward()
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    kw.pop("chunk_size", None)
    ref, _ = sampled_ref.linear_cross_entropy(
        ref_leaves[0], ref_leaves[1], target, ref_leaves[2] if b is not None else None, **kw
    )
    (ref * upstream).backward()
    assert_close_scaled(loss.detach(), ref.detach())
    for a, r in zip(leaves, ref_leaves, strict=True):
        assert a.grad.dtype == a.dtype
        assert_close_scaled(a.grad, r.grad)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 300),  # more than one 128-row tile, and a partial last tile
    d=st.integers(1, 9),
    s=st.integers(1, 1100),
    chunk=st.sampled_from([0, 1, 7, 64, 512]),
    bias=st.booleans(),
    reduction=st.sampled_from(["mean", "sum"]),
    scale=st.sampled_from([1.0, 0.5, -3.0]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    ignore_index=st.sampled_from([-100, 0]),
    upstream=st.sampled_from([1.0, 0.25, -2.0]),
    seed=st.integers(0, 2**31),
)
def test_fused_path_matches_reference(n, d, s, chunk, bias, reduction, scale, dtype, ignore_index, upstream, seed):
    h, W, target, b = _inputs(n, d, s, seed, dtype, bias, ignore_index, ignored=0.2)
    kw = dict(scale=scale, ignore_index=ignore_index, reduction=reduction, chunk_size=chunk)
    _fused_and_reference(h, W, target, b, upstream, **kw)


def test_fused_path_with_budget_limited_tiles():
    # s = 66000: a row of logits (129 chunks of 512) is 258 KiB, so the 32 MiB budget gives 127-row
    # tiles: 300 rows are tiles of 127, 127 and 46, none a multiple of the 128-row default.
    h, W, target, b = _inputs(300, 3, 66000, seed=7)
    _fused_and_reference(h, W, target, b, 1.0, reduction="mean")


def test_fused_path_only_when_it_applies():
    h, W, target, b = _inputs(20, 4, 50, seed=8)
    hg = h.clone().requires_grad_()
    fused = fedkernels.linear_cross_entropy(hg, W, target, b)
    assert type(fused.grad_fn).__name__ == "_FusedLinearCrossEntropyBackward"
    for kw in (dict(reduction="none"), dict(return_lse=True)):
        out = fedkernels.linear_cross_entropy(hg, W, target, b, **kw)
        out = out[0] if isinstance(out, tuple) else out
        assert type(out.grad_fn).__name__ != "_FusedLinearCrossEntropyBackward"
    with torch.no_grad():
        plain = fedkernels.linear_cross_entropy(hg, W, target, b)
    assert torch.equal(fused.detach(), plain)  # the same loss bits as the forward-only op
    assert fedkernels.linear_cross_entropy(h, W, target, b).grad_fn is None  # nothing needs a gradient


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_path_half_inputs(dtype):
    h, W, target, b = (t.to(dtype) if t.is_floating_point() else t for t in _inputs(40, 16, 700, seed=9))
    leaves = [t.clone().requires_grad_() for t in (h, W, b)]
    loss = fedkernels.linear_cross_entropy(*leaves[:2], target, leaves[2], reduction="sum")
    loss.backward()
    ref_in = [t.detach().double().requires_grad_() for t in (h, W, b)]
    ref, _ = sampled_ref.linear_cross_entropy(*ref_in[:2], target, ref_in[2], reduction="sum")
    ref.backward()
    torch.testing.assert_close(loss, ref.float())
    for leaf, r in zip(leaves, ref_in, strict=True):
        assert leaf.grad.dtype == dtype
        torch.testing.assert_close(leaf.grad, r.grad.to(dtype))


def _all_outputs(h, W, target, b, chunk):
    """Per-sample loss, lse, and the gradients of the two-op (non-fused) path and of the fused path."""
    loss, lse = fedkernels.linear_cross_entropy(h, W, target, b, reduction="none", chunk_size=chunk, return_lse=True)
    leaves = [t.clone().requires_grad_() for t in (h, W, b)]
    fedkernels.linear_cross_entropy(*leaves[:2], target, leaves[2], chunk_size=chunk).backward()
    return [loss, lse] + [t.grad for t in leaves]


@pytest.mark.parametrize("level", ["avx2", "avx512"])
@pytest.mark.parametrize("cols_case", ["tail", "exact", "under_one_vector"])
def test_vector_row_kernels_match_scalar_and_reference(level, cols_case):
    # Chunk widths that end in a masked tail (37 = 2 x 16 + 5), fill whole vectors (64), or are
    # shorter than one 16-lane vector (s = 5); logits over a wide range (scale 30) and masked classes.
    s, chunk = {"tail": (300, 37), "exact": (256, 64), "under_one_vector": (5, 0)}[cols_case]
    h, W, target, b = _inputs(70, 8, s, seed=10)
    b[::7] = float("-inf")
    target[target % 7 == 0] = 1  # no masked class as a target
    h = h * 30 / 8**0.5
    with at_level(level):
        vec = _all_outputs(h, W, target, b, chunk)
    with at_level("generic"):
        scalar = _all_outputs(h, W, target, b, chunk)
    ref_in = [t.double().requires_grad_() for t in (h, W, b)]
    ref_loss, ref_lse = sampled_ref.linear_cross_entropy(*ref_in[:2], target, ref_in[2], reduction="none")
    ref_loss.mean().backward()
    ref = [ref_loss.detach(), ref_lse.detach()] + [t.grad for t in ref_in]
    for v, sc, r in zip(vec, scalar, ref, strict=True):
        assert_close_scaled(v, r)
        assert_close_scaled(sc, r)
        assert torch.isfinite(v).all()


@pytest.mark.parametrize("level", ["generic", "avx2", "avx512"])
def test_vector_exp_extremes_and_nan(level):
    # logits far below the max (exp underflows to 0 or a subnormal), a +inf logit (lse inf, loss NaN
    # as in the composition), and a NaN feature: every level follows the scalar rules.
    W = torch.eye(3).repeat(11, 1)[:33]
    h = torch.tensor([[0.0, 100.0, -100.0], [float("inf"), 0.0, 0.0], [float("nan"), 1.0, 1.0], [1.0, 2.0, 3.0]])
    target = torch.tensor([0, 1, 2, 3])
    with at_level(level):
        got = fedkernels.linear_cross_entropy(h, W, target, reduction="none")
    want = torch.nn.functional.cross_entropy(h.double() @ W.double().T, target, reduction="none")
    torch.testing.assert_close(got[[0, 3]], want[[0, 3]].float())
    assert torch.isnan(got[1]) == torch.isnan(want[1]) and torch.isnan(got[2])


def test_fused_op_opcheck_and_bad_input():
    h, W, target, b = _inputs(6, 8, 10, seed=3)
    for reduction in ("mean", "sum"):
        args = (h, W, target, b, 1.5, -100, reduction, 4)
        torch.library.opcheck(torch.ops.fedkernels.linear_cross_entropy_fused.default, args)
    fused = torch.ops.fedkernels.linear_cross_entropy_fused
    with raw_op_raises(ValueError, "reduction"):
        fused(h, W, target, b, 1.0, -100, "none", 4)
    with pytest.raises((ValueError, RuntimeError), match="target"):
        fused(h, W, target[:-1], b, 1.0, -100, "mean", 4)
    with raw_op_raises(IndexError, r"target .* must lie in \[0, 10\)"):
        fused(h, W, torch.full_like(target, 10), b, 1.0, -100, "mean", 4)
