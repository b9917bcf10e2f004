"""linear_cross_entropy: loss and gradients against the dense float64 reference, edge cases, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import sampled_ref
from python_tests.support.op_errors import raw_op_raises


def assert_close_scaled(got: torch.Tensor, want: torch.Tensor) -> None:
    """float32 agreement measured against the tensor's own scale.

    A gradient entry is a sum of N or s terms of magnitude up to max|want| (scale can be 16), so its
    float32 rounding error scales with that magnitude, not with the entry itself: the absolute
    tolerance is float32's default 1e-5 times (1 + max|want|), the relative one its default 1.3e-6.
    float64 uses the float64 defaults unchanged.
    """
    want = want.to(got.dtype)
    if got.dtype != torch.float32 or got.numel() == 0:
        torch.testing.assert_close(got, want)
        return
    torch.testing.assert_close(got, want, rtol=1.3e-6, atol=1e-5 * (1 + float(want.abs().max())))


def _grads(loss: torch.Tensor, inputs: list[torch.Tensor], seed: int = 0) -> list[torch.Tensor | None]:
    g = torch.randn(loss.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(loss.dtype)
    return list(torch.autograd.grad(loss, inputs, g, allow_unused=True))


@st.composite
def lce_case(draw):
    n = draw(st.integers(0, 40))
    d = draw(st.integers(1, 12))
    s = draw(st.integers(1, 300))
    ignore_index = draw(st.sampled_from([-100, 0, 3]))
    target = draw(st.lists(st.one_of(st.integers(0, s - 1), st.just(ignore_index)), min_size=n, max_size=n))
    return dict(
        n=n,
        d=d,
        s=s,
        target=target,
        ignore_index=ignore_index,
        chunk=draw(st.sampled_from([0, 1, 3, 7, 64, 512])),
        reduction=draw(st.sampled_from(["mean", "sum", "none"])),
        bias=draw(st.booleans()),
        scale=draw(st.sampled_from([1.0, 0.5, 16.0, -2.0])),
        ties=draw(st.booleans()),
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        seed=draw(st.integers(0, 2**31)),
    )


def _make(case):
    g = torch.Generator().manual_seed(case["seed"])
    n, d, s, dtype = case["n"], case["d"], case["s"], case["dtype"]
    h = torch.randn(n, d, generator=g, dtype=dtype)
    W = torch.randn(s, d, generator=g, dtype=dtype)
    if case["ties"]:  # equal class rows: tied logits
        W = W[torch.arange(s) % 3]
    bias = torch.randn(s, generator=g, dtype=dtype) if case["bias"] else None
    target = torch.tensor(case["target"], dtype=torch.int64).reshape(n)
    return h, W, target, bias


@given(case=lce_case())
def test_loss_and_grads_match_reference(case):
    h, W, target, bias = _make(case)
    kw = dict(scale=case["scale"], ignore_index=case["ignore_index"], reduction=case["reduction"])
    leaves = [t.clone().requires_grad_() for t in (h, W) + ((bias,) if bias is not None else ())]
    loss = fedkernels.linear_cross_entropy(
        leaves[0], leaves[1], target, leaves[2] if bias is not None else None, chunk_size=case["chunk"], **kw
    )
    ref_leaves = [t.clone().requires_grad_() for t in leaves]
    ref, _ = sampled_ref.linear_cross_entropy(
        ref_leaves[0], ref_leaves[1], target, ref_leaves[2] if bias is not None else None, **kw
    )
    want_dtype = torch.float64 if case["dtype"] == torch.float64 else torch.float32
    assert loss.dtype == want_dtype and loss.shape == ref.shape
    assert_close_scaled(loss, ref)
    got = _grads(loss, leaves, case["seed"])
    want = _grads(ref, ref_leaves, case["seed"])
    for a, b, leaf in zip(got, want, leaves, strict=True):
        b = torch.zeros_like(leaf) if b is None else b
        assert a.dtype == leaf.dtype
        assert_close_scaled(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_accumulate_in_float32(dtype):
    g = torch.Generator().manual_seed(1)
    h = torch.randn(50, 32, generator=g).to(dtype).requires_grad_()
    W = torch.randn(700, 32, generator=g).to(dtype).requires_grad_()
    bias = torch.randn(700, generator=g).to(dtype).requires_grad_()
    target = torch.randint(0, 700, (50,), generator=g)
    loss = fedkernels.linear_cross_entropy(h, W, target, bias, chunk_size=128)
    assert loss.dtype == torch.float32
    # the reference sees exactly the same (rounded) inputs, upcast: the float32 accumulation is what's compared
    ref_in = [t.detach().double().requires_grad_() for t in (h, W, bias)]
    ref, _ = sampled_ref.linear_cross_entropy(*ref_in[:2], target, ref_in[2])
    torch.testing.assert_close(loss, ref.float())
    loss.backward()
    ref.backward()
    for leaf, r in zip((h, W, bias), ref_in, strict=True):
        assert leaf.grad.dtype == dtype
        torch.testing.assert_close(leaf.grad, r.grad.to(dtype))  # dtype's own tolerance: one rounding


def test_gradcheck_all_reductions_and_lse():
    g = torch.Generator().manual_seed(2)
    h = torch.randn(7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    W = torch.randn(11, 5, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(11, generator=g, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 10, -100, 3, 3, 7, -100])
    for reduction in ("mean", "sum", "none"):

        def f(h, W, bias, reduction=reduction):
            loss, lse = fedkernels.linear_cross_entropy(
                h, W, target, bias, scale=1.5, reduction=reduction, chunk_size=4, return_lse=True
            )
            return loss, lse

        assert torch.autograd.gradcheck(f, (h, W, bias))
    assert torch.autograd.gradcheck(lambda h, W: fedkernels.linear_cross_entropy(h, W, target, chunk_size=3), (h, W))


def test_lse_output_matches_and_differentiates():
    g = torch.Generator().manual_seed(3)
    h = torch.randn(9, 4, generator=g, dtype=torch.float64, requires_grad=True)
    W = torch.randn(20, 4, generator=g, dtype=torch.float64)
    target = torch.randint(0, 20, (9,), generator=g)
    _, lse = fedkernels.linear_cross_entropy(h, W, target, return_lse=True, chunk_size=6)
    torch.testing.assert_close(lse, torch.logsumexp(h @ W.T, 1))
    (gh,) = torch.autograd.grad(lse.sum(), h)
    (rh,) = torch.autograd.grad(torch.logsumexp(h @ W.T, 1).sum(), h)
    torch.testing.assert_close(gh, rh)


def test_all_ignored_mean_is_zero_with_zero_grads():
    h = torch.randn(4, 3, requires_grad=True)
    W = torch.randn(6, 3, requires_grad=True)
    loss = fedkernels.linear_cross_entropy(h, W, torch.full((4,), -100))
    assert loss.item() == 0.0
    loss.backward()
    assert torch.count_nonzero(h.grad) == 0 and torch.count_nonzero(W.grad) == 0


def test_empty_batch():
    h = torch.zeros(0, 3, requires_grad=True)
    W = torch.randn(6, 3, requires_grad=True)
    target = torch.zeros(0, dtype=torch.int64)
    assert fedkernels.linear_cross_entropy(h, W, target).item() == 0.0
    assert fedkernels.linear_cross_entropy(h, W, target, reduction="none").shape == (0,)
    fedkernels.linear_cross_entropy(h, W, target, reduction="sum").backward()
    assert W.grad.shape == W.shape and torch.count_nonzero(W.grad) == 0


def test_minus_inf_bias_masks_a_class_and_nan_propagates():
    g = torch.Generator().manual_seed(4)
    h, W = torch.randn(5, 3, generator=g), torch.randn(8, 3, generator=g)
    bias = torch.zeros(8)
    bias[[2, 5]] = float("-inf")
    target = torch.tensor([0, 1, 3, 4, 7])
    got = fedkernels.linear_cross_entropy(h, W, target, bias, reduction="none", chunk_size=2)
    keep = torch.tensor([0, 1, 3, 4, 6, 7])
    want = torch.nn.functional.cross_entropy(h @ W[keep].T, torch.tensor([0, 1, 2, 3, 5]), reduction="none")
    torch.testing.assert_close(got, want)
    h[1, 0] = float("nan")
    got = fedkernels.linear_cross_entropy(h, W, target, reduction="none", chunk_size=3)
    assert torch.isnan(got[1]) and not torch.isnan(got[[0, 2, 3, 4]]).any()


def test_on_device(device):
    g = torch.Generator().manual_seed(5)
    h, W, b = torch.randn(30, 8, generator=g), torch.randn(100, 8, generator=g), torch.randn(100, generator=g)
    target = torch.randint(0, 100, (30,), generator=g)
    args = [t.to(device).requires_grad_() for t in (h, W, b)]
    loss = fedkernels.linear_cross_entropy(args[0], args[1], target.to(device), args[2], chunk_size=16)
    loss.backward()
    ref_in = [t.detach().double().requires_grad_() for t in (h, W, b)]
    ref, _ = sampled_ref.linear_cross_entropy(ref_in[0], ref_in[1], target, ref_in[2])
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref.float())
    for a, r in zip(args, ref_in, strict=True):
        torch.testing.assert_close(a.grad.cpu(), r.grad.float())


def test_deterministic_across_threads():
    g = torch.Generator().manual_seed(6)
    h = torch.randn(700, 24, generator=g)
    W = torch.randn(3000, 24, generator=g)
    b = torch.randn(3000, generator=g)
    target = torch.randint(0, 3000, (700,), generator=g)

    def run():
        leaves = [t.clone().requires_grad_() for t in (h, W, b)]
        loss = fedkernels.linear_cross_entropy(leaves[0], leaves[1], target, leaves[2], chunk_size=256)
        loss.backward()
        return [loss.detach()] + [t.grad for t in leaves]

    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = run()
        torch.set_num_threads(max(2, old))
        b2 = run()
    finally:
        torch.set_num_threads(old)
    for x, y in zip(a, b2, strict=True):
        assert torch.equal(x, y)


def _args():
    return (torch.randn(4, 3), torch.randn(6, 3), torch.tensor([0, 5, -100, 2]), torch.randn(6))


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda a: (a[0].long(), a[1], a[2], a[3]), ValueError, "h must"),
        (lambda a: (a[0][0], a[1], a[2], a[3]), ValueError, "h must"),
        (lambda a: (a[0], a[1].double(), a[2], a[3]), ValueError, "W must"),
        (lambda a: (a[0], a[1][:, :2], a[2], a[3]), ValueError, "W must"),
        (lambda a: (a[0], a[1], a[2].float(), a[3]), ValueError, "target"),
        (lambda a: (a[0], a[1], a[2][:3], a[3]), ValueError, "target"),
        (lambda a: (a[0], a[1], torch.tensor([0, 6, 1, 1]), a[3]), IndexError, "target"),
        (lambda a: (a[0], a[1], torch.tensor([0, -1, 1, 1]), a[3]), IndexError, "target"),
        (lambda a: (a[0], a[1], a[2], a[3][:5]), ValueError, "bias"),
        (lambda a: (a[0], a[1], a[2], a[3].long()), ValueError, "bias"),
    ],
)
def test_bad_input(mutate, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.linear_cross_entropy(*mutate(_args()))


def test_bad_reduction_and_chunk():
    with pytest.raises(ValueError, match="reduction"):
        fedkernels.linear_cross_entropy(*_args(), reduction="avg")
    with raw_op_raises(ValueError, "reduction"):
        torch.ops.fedkernels.linear_cross_entropy(*_args(), 1.0, -100, "avg", 0)
    with pytest.raises(ValueError, match="chunk_size"):
        fedkernels.linear_cross_entropy(*_args(), chunk_size=-1)


def test_opcheck_and_compile():
    h, W, t, b = _args()
    for reduction in ("mean", "none"):
        args = (h.requires_grad_(), W.requires_grad_(), t, b.requires_grad_(), 2.0, -100, reduction, 2)
        torch.library.opcheck(torch.ops.fedkernels.linear_cross_entropy.default, args)
    lse = torch.logsumexp(2.0 * h.detach() @ W.detach().T + b.detach(), 1)
    torch.library.opcheck(
        torch.ops.fedkernels.linear_cross_entropy_backward.default,
        (h.detach(), W.detach(), t, b.detach(), lse, torch.ones(4), torch.zeros(4), 2.0, -100, 2),
    )
    compiled = torch.compile(lambda h, W: fedkernels.linear_cross_entropy(h, W, t, b, chunk_size=2), fullgraph=True)
    torch.testing.assert_close(compiled(h, W), fedkernels.linear_cross_entropy(h, W, t, b, chunk_size=2))
