"""spreadout_loss and its parts against the direct formula and its autograd gradient."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels import PairWeights
from python_tests.reference import spread_ref


def _random_pair_weights(c: int, density: float, seed: int) -> PairWeights:
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(c, c, generator=g) < density) & ~torch.eye(c, dtype=torch.bool)
    rows, cols = mask.nonzero(as_tuple=True)
    return PairWeights.from_pairs(rows, cols, torch.rand(rows.numel(), generator=g), c)


def _loss_and_grad(fn, W):
    W = W.detach().clone().requires_grad_(True)
    loss = fn(W)
    (grad,) = torch.autograd.grad(loss, W)
    return loss.detach(), grad


@given(
    c=st.integers(2, 40),
    d=st.integers(1, 8),
    data=st.data(),
    margin=st.floats(0.0, 6.0),
    metric=st.sampled_from(["l2", "cosine"]),
    density=st.sampled_from([0.0, 0.2, 0.7]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_matches_direct_formula(c, d, data, margin, metric, density, dtype, seed):
    k = data.draw(st.integers(0, c - 1))
    W = torch.randn(c, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
    pw = _random_pair_weights(c, density, seed) if density > 0 else None
    got_l, got_g = _loss_and_grad(lambda w: fedkernels.spreadout_loss(w, margin, k, pw, metric), W)
    alpha = pw.dense() if pw is not None else None
    want_l, want_g = _loss_and_grad(lambda w: spread_ref.spreadout_loss(w, margin, k, alpha, metric), W.double())
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    assert got_l.dtype == (torch.float64 if dtype == torch.float64 else torch.float32) and got_l.dim() == 0
    torch.testing.assert_close(got_l.double(), want_l, rtol=tol, atol=tol)
    torch.testing.assert_close(got_g.double(), want_g, rtol=tol, atol=tol)


@pytest.mark.parametrize("metric", ["l2", "cosine"])
@pytest.mark.parametrize("weighted", [False, True])
def test_gradcheck(metric, weighted):
    W = torch.randn(30, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    pw = _random_pair_weights(30, 0.3, 2) if weighted else None
    margin = 3.0 if metric == "l2" else 1.2
    assert torch.autograd.gradcheck(lambda w: fedkernels.spreadout_loss(w, margin, 6, pw, metric), (W,))


def test_half_precision_gradient():
    W = torch.randn(100, 16, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    got_l, got_g = _loss_and_grad(lambda w: fedkernels.spreadout_loss(w, 6.0, 5), W)
    want_l, want_g = _loss_and_grad(lambda w: spread_ref.spreadout_loss(w, 6.0, 5, None, "l2"), W.double())
    assert got_g.dtype == torch.bfloat16 and got_l.dtype == torch.float32
    torch.testing.assert_close(got_l.double(), want_l, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_g.double(), want_g, rtol=1e-2, atol=1e-2)  # bf16 output rounding


def test_hand_computed():
    # Three points on a line: 0, 1, 3. k = 1, margin 2: pairs 0->1 (d 1), 1->0 (d 1), 2->1 (d 2).
    W = torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64, requires_grad=True)
    pw = PairWeights.from_pairs(torch.tensor([1]), torch.tensor([0]), torch.tensor([0.5]), 3)
    loss = fedkernels.spreadout_loss(W, 2.0, 1, pw)
    assert loss.item() == pytest.approx(1.0 + 0.5 * 1.0 + 0.0)
    loss.backward()
    # d/dw0: pair 0->1: -2*1*(w0-w1)/1 = 2 ; pair 1->0 (alpha .5): -2*.5*1*(w0-w1) = 1  -> 3
    assert W.grad[:, 0].tolist() == pytest.approx([3.0, -3.0, 0.0])


def test_zero_distance_pairs_have_zero_gradient():
    W = torch.ones(4, 3, requires_grad=True)
    loss = fedkernels.spreadout_loss(W, 1.0, 2)
    loss.backward()
    assert loss.item() == pytest.approx(8.0) and torch.equal(W.grad, torch.zeros(4, 3))


def test_k_zero_and_margin_zero():
    W = torch.randn(6, 2, requires_grad=True)
    for margin, k in [(3.0, 0), (0.0, 3)]:
        loss = fedkernels.spreadout_loss(W, margin, k)
        (g,) = torch.autograd.grad(loss, W)
        assert loss.item() == 0.0 and torch.equal(g, torch.zeros_like(W))


def test_on_device(device):
    W = torch.randn(300, 12, generator=torch.Generator().manual_seed(4)).to(device).requires_grad_(True)
    pw = _random_pair_weights(300, 0.05, 5).to(device)
    loss = fedkernels.spreadout_loss(W, 4.0, 8, pw)
    loss.backward()
    want_l, want_g = _loss_and_grad(
        lambda w: spread_ref.spreadout_loss(w, 4.0, 8, pw.dense().cpu(), "l2"), W.detach().cpu().double()
    )
    assert W.grad.device.type == device
    torch.testing.assert_close(loss.detach().cpu().double(), want_l, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(W.grad.cpu().double(), want_g, rtol=1e-4, atol=1e-4)


def test_pair_weight_gather_and_dense():
    pw = PairWeights.from_pairs(torch.tensor([2, 0, 0]), torch.tensor([1, 3, 1]), torch.tensor([0.1, 0.2, 0.3]), 4)
    assert pw.indptr.tolist() == [0, 2, 2, 3, 3] and pw.indices.tolist() == [1, 3, 1]
    idx = torch.tensor([[1, 3], [0, 2], [1, 0], [2, 1]])
    got = fedkernels.pair_weight_gather(pw, idx)
    want = pw.dense()[torch.arange(4)[:, None], idx]
    assert torch.equal(got, want) and got[0].tolist() == pytest.approx([0.3, 0.2]) and got[3].tolist() == [1.0, 1.0]


def _pw(c=4):
    return PairWeights.from_pairs(torch.tensor([0, 1]), torch.tensor([2, 3]), torch.tensor([0.5, 0.25]), c)


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: (torch.randn(5, 2), -1.0, 2, None), ValueError, "margin"),
        (lambda: (torch.randn(5, 2), float("nan"), 2, None), ValueError, "margin"),
        (lambda: (torch.randn(5, 2), 1.0, 5, None), ValueError, "k must be < C"),
        (lambda: (torch.randn(5, 2), 1.0, -2, None), ValueError, "k must be >= 0"),
        (lambda: (torch.randn(5, 2), 1.0, 2, _pw(4)), ValueError, "indptr must have C \\+ 1"),
        (
            lambda: (torch.randn(4, 2), 1.0, 2, PairWeights(_pw().indptr, torch.tensor([2, 7]), _pw().values)),
            IndexError,
            "pair_weight indices",
        ),
        (
            lambda: (
                torch.randn(4, 2),
                1.0,
                2,
                PairWeights(torch.tensor([0, 2, 2, 2, 2]), torch.tensor([3, 1]), _pw().values),
            ),
            ValueError,
            "strictly increasing",
        ),
        (
            lambda: (torch.randn(4, 2), 1.0, 2, PairWeights(_pw().indptr, _pw().indices, torch.tensor([0.5, -1.0]))),
            ValueError,
            "pair_weight values must be >= 0",
        ),
        (
            lambda: (torch.randn(4, 2), 1.0, 2, PairWeights(_pw().indptr, _pw().indices, _pw().values.double())),
            ValueError,
            "pair_weight values must have dtype",
        ),
        (
            lambda: (torch.randn(4, 2), 1.0, 2, PairWeights(_pw().indptr, _pw().indices, torch.tensor([0.5]))),
            ValueError,
            "pair_weight values must have one entry",
        ),
        (
            lambda: (torch.randn(4, 2), 1.0, 2, PairWeights(_pw().indptr.int(), _pw().indices, _pw().values)),
            ValueError,
            "pair_weight indptr",
        ),
    ],
)
def test_bad_input(make, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.spreadout_loss(*make())


def test_bad_pair_loss_input():
    W = torch.randn(4, 2)
    idx = torch.tensor([[1], [0], [3], [2]])
    with pytest.raises(IndexError, match="idx"):
        fedkernels.spreadout_pair_loss(W, idx + 4, torch.ones(4, 1), 1.0)
    with pytest.raises(ValueError, match="weight must have the shape"):
        fedkernels.spreadout_pair_loss(W, idx, torch.ones(4, 2), 1.0)
    with pytest.raises(ValueError, match="weight must be finite"):
        fedkernels.spreadout_pair_loss(W, idx, torch.full((4, 1), float("nan")), 1.0)
    with pytest.raises(ValueError, match="pair_weight needs all"):
        torch.ops.fedkernels.spreadout_loss(W, 1.0, 1, _pw().indptr, None, None)


def test_opcheck():
    W = torch.randn(20, 4, dtype=torch.float64, requires_grad=True)
    _, idx = fedkernels.knn_classes(W.detach(), 3)
    pw = _random_pair_weights(20, 0.3, 0)
    weight = fedkernels.pair_weight_gather(pw, idx)
    torch.library.opcheck(torch.ops.fedkernels.spreadout_pair_loss.default, (W, idx, weight, 2.0, "l2"))
    torch.library.opcheck(torch.ops.fedkernels.spreadout_pair_loss.default, (W, idx, weight, 0.5, "cosine"))
    torch.library.opcheck(torch.ops.fedkernels.pair_weight_gather.default, (pw.indptr, pw.indices, pw.values, idx))
    torch.library.opcheck(
        torch.ops.fedkernels.spreadout_pair_loss_backward.default,
        (torch.tensor(1.0, dtype=torch.float64), W.detach(), idx, weight, 2.0, "l2"),
    )


def test_compile_fullgraph_forward_and_backward():
    W = torch.randn(50, 6, dtype=torch.float64)
    pw = _random_pair_weights(50, 0.2, 3)
    compiled = torch.compile(lambda w: fedkernels.spreadout_loss(w, 3.0, 4, pw), fullgraph=True)
    a, ga = _loss_and_grad(compiled, W)
    b, gb = _loss_and_grad(lambda w: fedkernels.spreadout_loss(w, 3.0, 4, pw), W)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(ga, gb)


def test_deterministic_across_threads():
    W = torch.randn(3000, 16, generator=torch.Generator().manual_seed(8))
    pw = _random_pair_weights(3000, 0.001, 9)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = _loss_and_grad(lambda w: fedkernels.spreadout_loss(w, 5.0, 10, pw), W)
        torch.set_num_threads(max(2, old))
        b = _loss_and_grad(lambda w: fedkernels.spreadout_loss(w, 5.0, 10, pw), W)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
