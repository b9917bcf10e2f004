"""prox_tv1d: optimality certificates, an independent dual-QP solver, edge cases, autograd, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import prox_ref


def _check_rows(z: torch.Tensor, u: torch.Tensor, lam_rows: np.ndarray, anchored: bool, block: int = 0) -> None:
    """Every row (or block) of u passes the dual certificate of its own problem."""
    zr = z.detach().double().reshape(-1, z.shape[-1]).cpu().numpy()
    ur = u.detach().double().reshape(-1, z.shape[-1]).cpu().numpy()
    d = z.shape[-1]
    bs = block if 0 < block < d else d
    tol_scale = 1e-9 if z.dtype == torch.float64 else 1e-5
    for r in range(zr.shape[0]):
        lam = float(lam_rows[r])
        for a in range(0, d, max(bs, 1)):
            zz, uu = zr[r, a : a + bs], ur[r, a : a + bs]
            scale = 1.0 + np.abs(np.cumsum(zz)).max() + lam
            if z.dtype == torch.float32:
                # the float32 output is the exact solution rounded once: certify the float64 solve
                uu64 = fedkernels.prox_tv1d(torch.tensor(zz), lam, anchored).numpy()
                assert np.allclose(uu, uu64, rtol=1e-6, atol=1e-6 * scale)
                uu = uu64
            v = prox_ref.tv1d_certificate_violation(zz, uu, lam, anchored)
            assert v <= tol_scale * scale * len(zz), (v, zz, uu, lam)


values = st.one_of(
    st.floats(-100, 100, allow_nan=False, width=64),
    st.sampled_from([0.0, 1.0, -1.0, 2.5]),  # ties and repeated values
)


@given(
    rows=st.integers(1, 4),
    d=st.integers(1, 40),
    lam=st.floats(0, 50),
    anchored=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    data=st.data(),
)
def test_certificate_random(rows, d, lam, anchored, dtype, data):
    z = torch.tensor(data.draw(st.lists(values, min_size=rows * d, max_size=rows * d)), dtype=dtype).view(rows, d)
    u = fedkernels.prox_tv1d(z, lam, anchored)
    assert u.shape == z.shape and u.dtype == dtype
    _check_rows(z, u, np.full(rows, lam), anchored)


@given(d=st.integers(1, 25), lam=st.floats(0.01, 20), anchored=st.booleans(), seed=st.integers(0, 2**31))
def test_matches_independent_dual_qp(d, lam, anchored, seed):
    z = np.random.default_rng(seed).normal(0, 3, size=d)
    u = fedkernels.prox_tv1d(torch.tensor(z), lam, anchored).numpy()
    slow = prox_ref.tv1d_slow(z, lam, anchored)
    f_fast = prox_ref.tv1d_objective(z, u, lam, anchored)
    f_slow = prox_ref.tv1d_objective(z, slow, lam, anchored)
    assert f_fast <= f_slow + 1e-9 * (1 + abs(f_slow))
    assert np.allclose(u, slow, atol=1e-5 * (1 + np.abs(z).max()))


@given(d=st.integers(1, 300), seed=st.integers(0, 2**31), block=st.integers(1, 64), anchored=st.booleans())
def test_blockwise_is_independent_blocks(d, seed, block, anchored):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(3, d, generator=g, dtype=torch.float64)
    lam = torch.rand(3, 1, generator=g, dtype=torch.float64).squeeze(1) * 2
    u = fedkernels.prox_tv1d(z, lam, anchored, block_size=block)
    for a in range(0, d, block):
        want = fedkernels.prox_tv1d(z[:, a : a + block].contiguous(), lam, anchored)
        assert torch.equal(u[:, a : a + block], want)
    _check_rows(z, u, lam.numpy(), anchored, block)


def test_per_row_lam_and_broadcast(device):
    g = torch.Generator().manual_seed(3)
    z = torch.randn(2, 3, 50, generator=g, dtype=torch.float64).to(device)
    lam = torch.tensor([[0.0], [1.5]], dtype=torch.float64, device=device)  # broadcasts over dim 1
    u = fedkernels.prox_tv1d(z, lam)
    assert torch.equal(u[0], z[0])  # lam = 0 returns z exactly
    for j in range(3):
        assert torch.equal(u[1, j], fedkernels.prox_tv1d(z[1, j], 1.5))


def test_edge_cases(device):
    z = torch.tensor([1.0, -2.0, 3.5], device=device)
    assert torch.equal(fedkernels.prox_tv1d(z, 0.0), z)
    # d = 1: anchored soft-thresholds, free returns z
    one = torch.tensor([[2.0], [-0.5]], dtype=torch.float64, device=device)
    assert torch.allclose(
        fedkernels.prox_tv1d(one, 1.0), torch.tensor([[1.0], [0.0]], dtype=torch.float64, device=device)
    )
    assert torch.equal(fedkernels.prox_tv1d(one, 1.0, anchored=False), one)
    # constant input: free keeps it, anchored shrinks it towards 0 by lam / d
    c = torch.full((10,), 4.0, dtype=torch.float64, device=device)
    assert torch.allclose(fedkernels.prox_tv1d(c, 3.0, anchored=False), c)
    assert torch.allclose(fedkernels.prox_tv1d(c, 3.0), c - 0.3)
    # huge lam: free gives the mean, anchored gives zero
    r = torch.randn(1000, dtype=torch.float64, device=device)
    assert torch.allclose(fedkernels.prox_tv1d(r, 1e9, anchored=False), r.mean().expand(1000), atol=1e-6)
    assert torch.equal(fedkernels.prox_tv1d(r, 1e9), torch.zeros_like(r))
    # empty rows and empty batches
    assert fedkernels.prox_tv1d(torch.zeros(3, 0, device=device), 1.0).shape == (3, 0)
    assert fedkernels.prox_tv1d(torch.zeros(0, 5, device=device), 1.0).shape == (0, 5)


def _slow_bend_row(n: int, sag: float, lam: float) -> np.ndarray:
    """A row on which the direct (Condat-style) scan is quadratic: a spike, then cumulative sums on a
    parabola, so every bend is found only at the row's end and the scan restarts one sample later."""
    k = np.arange(1, n)
    eps = sag * lam / n**2
    return np.concatenate([[100.0 * lam], -eps * (2.0 * k - 1)])


@pytest.mark.parametrize(
    "n, sag, anchored", [(300, 1.5, False), (2000, 1.5, False), (300, 4.0, True), (2000, 4.0, True)]
)
def test_quadratic_case_for_direct_scan_falls_back(n, sag, anchored):
    # These rows exhaust the direct algorithm's rescan budget, so the funnel solves them: still exact.
    z = torch.tensor(_slow_bend_row(n, sag, 1.0))
    u = fedkernels.prox_tv1d(z, 1.0, anchored)
    _check_rows(z.view(1, -1), u.view(1, -1), np.ones(1), anchored)
    assert torch.equal(fedkernels.prox_tv1d(z.float(), 1.0, anchored), u.float())


@given(
    n=st.integers(2, 400),
    sag=st.floats(0.5, 6.0),
    noise=st.sampled_from([0.0, 1e-3, 0.1]),
    lam=st.floats(0.05, 5.0),
    anchored=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_certificate_near_worst_case(n, sag, noise, lam, anchored, seed):
    # Rows around the direct scan's worst case (some take the fallback, some not), noise on top.
    z = _slow_bend_row(n, sag, lam) + noise * np.random.default_rng(seed).normal(size=n)
    z = torch.tensor(z).view(1, -1)
    _check_rows(z, fedkernels.prox_tv1d(z, lam, anchored), np.full(1, lam), anchored)


def test_long_row_and_huge_values():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(200_000, generator=g, dtype=torch.float64) * 1e6
    lam = 2e6
    for anchored in (True, False):
        u = fedkernels.prox_tv1d(z, lam, anchored).numpy()
        p = prox_ref.tv1d_dual(z.numpy(), u)
        tol = 1e-9 * np.abs(np.cumsum(z.numpy())).max()
        assert np.abs(p).max() <= lam + tol
        down, up = u[:-1] > u[1:], u[:-1] < u[1:]
        assert np.abs(p[:-1][down] - lam).max(initial=0) <= tol and np.abs(p[:-1][up] + lam).max(initial=0) <= tol
        if not anchored:
            assert abs(p[-1]) <= tol
        # a staircase: far fewer runs than samples
        assert down.sum() + up.sum() < 200_000 // 4


def test_float32_uses_float64_accumulation():
    g = torch.Generator().manual_seed(5)
    z = torch.randn(4, 100_000, generator=g)
    u32 = fedkernels.prox_tv1d(z, 0.7)
    u64 = fedkernels.prox_tv1d(z.double(), 0.7)
    assert torch.equal(u32, u64.float())  # one rounding of the float64 answer


@pytest.mark.parametrize("anchored", [True, False])
def test_gradcheck(anchored):
    g = torch.Generator().manual_seed(7)
    z = (torch.randn(3, 12, generator=g, dtype=torch.float64) * 2).requires_grad_()
    lam = torch.tensor([0.3, 0.8, 0.05], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: fedkernels.prox_tv1d(a, b, anchored), (z, lam))
    lam0 = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: fedkernels.prox_tv1d(a, b, anchored, block_size=5), (z, lam0))


def test_calls_without_grad_skip_the_autograd_kernel_with_same_bits():
    """A call no gradient can flow through skips the Python autograd kernel (its per-call cost is a
    1000-entry solve): same bits as the tracked call, and a graph whenever z or a tensor lam needs one."""
    g = torch.Generator().manual_seed(5)
    z = torch.randn(4, 50, dtype=torch.float64, generator=g) * 2
    lam = torch.rand(4, dtype=torch.float64, generator=g)
    plain = fedkernels.prox_tv1d(z, lam)
    tracked = fedkernels.prox_tv1d(z.clone().requires_grad_(), lam)
    assert plain.grad_fn is None and tracked.grad_fn is not None
    assert torch.equal(plain, tracked.detach())
    lam_g = lam.clone().requires_grad_()
    assert fedkernels.prox_tv1d(z, lam_g).grad_fn is not None
    assert torch.autograd.gradcheck(lambda b: fedkernels.prox_tv1d(z, b), (lam_g,))
    with torch.no_grad():
        assert fedkernels.prox_tv1d(z.clone().requires_grad_(), lam).grad_fn is None
    with torch.inference_mode():
        assert torch.equal(fedkernels.prox_tv1d(z, lam), plain)
    float_lam = fedkernels.prox_tv1d(z, 0.7)
    assert torch.equal(float_lam, fedkernels.prox_tv1d(z, torch.tensor(0.7, dtype=torch.float64)))


def test_float_lam_first_seen_in_inference_mode_still_supports_backward():
    """A float lam's tensor is made once and reused; made under inference mode it must still be
    savable for a later call's backward (an inference tensor is not)."""
    z = torch.randn(3, 40, dtype=torch.float64)
    with torch.inference_mode():
        first = fedkernels.prox_tv1d(z, 0.3125)
    zg = z.clone().requires_grad_()
    u = fedkernels.prox_tv1d(zg, 0.3125)
    u.sum().backward()
    assert torch.equal(u.detach(), first) and zg.grad is not None
    for i in range(200):  # many distinct lams: the cache stays bounded and answers stay right
        assert torch.equal(
            fedkernels.prox_tv1d(z, 0.01 * i), fedkernels.prox_tv1d(z, torch.tensor(0.01 * i, dtype=torch.float64))
        )
    assert len(fedkernels.ops.prox._LAM_TENSORS) <= fedkernels.ops.prox._LAM_TENSORS_MAX


def test_gradient_averages_over_segments():
    z = torch.tensor([3.0, 3.2, -1.0, -0.8, 0.1], dtype=torch.float64, requires_grad=True)
    u = fedkernels.prox_tv1d(z, 0.5)  # segments {0,1}, {2,3}, {4} pinned to 0
    assert torch.allclose(u.detach(), torch.tensor([2.85, 2.85, -0.4, -0.4, 0.0], dtype=torch.float64))
    (gz,) = torch.autograd.grad(u, z, torch.tensor([1.0, 3.0, 2.0, 0.0, 5.0], dtype=torch.float64))
    assert torch.allclose(gz, torch.tensor([2.0, 2.0, 1.0, 1.0, 0.0], dtype=torch.float64))


def test_opcheck_and_compile():
    z = torch.randn(4, 30, dtype=torch.float64, requires_grad=True)
    lam = torch.tensor([0.1, 0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.fedkernels.prox_tv1d.default, (z, lam, True, 0))
    torch.library.opcheck(torch.ops.fedkernels.prox_tv1d.default, (z.detach().float(), lam.detach(), False, 7))
    compiled = torch.compile(lambda a: fedkernels.prox_tv1d(a, 0.4), fullgraph=True)
    assert torch.equal(compiled(z.detach()), fedkernels.prox_tv1d(z.detach(), 0.4))


def test_deterministic_across_threads():
    g = torch.Generator().manual_seed(11)
    z = torch.randn(64, 5000, generator=g)
    lam = torch.rand(64, generator=g)
    old = torch.get_num_threads()
    outs = []
    try:
        for t in (1, 2):
            torch.set_num_threads(t)
            zz = z.clone().requires_grad_()
            ll = lam.clone().requires_grad_()
            u = fedkernels.prox_tv1d(zz, ll, block_size=700)
            u.backward(torch.cos(torch.arange(5000.0)).expand(64, 5000))
            outs.append((u.detach(), zz.grad, ll.grad))
    finally:
        torch.set_num_threads(old)
    for a, b in zip(outs[0], outs[1], strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((torch.tensor([1.0, float("nan")]), 1.0), ValueError, "z must be finite"),
        ((torch.tensor([1.0, float("inf")]), 0.0), ValueError, "z must be finite"),
        ((torch.tensor([1.0, 2.0]), -0.1), ValueError, "lam must be >= 0"),
        ((torch.tensor([1.0, 2.0]), float("nan")), ValueError, "lam must be finite"),
        ((torch.tensor([1, 2]), 1.0), ValueError, "z must be float32 or float64"),
        ((torch.tensor(1.0), 1.0), ValueError, "z must have at least one dimension"),
        ((torch.ones(3, 4), torch.ones(2)), ValueError, "lam of shape"),
        ((torch.ones(3, 4), torch.ones(3, dtype=torch.int64)), ValueError, "lam must be a float32 or float64"),
    ],
)
def test_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.prox_tv1d(*args)


def test_bad_block_size():
    with pytest.raises(ValueError, match="block_size"):
        fedkernels.prox_tv1d(torch.ones(5), 1.0, block_size=-1)
