"""The CUDA launchers' tile and warp paths of the spreadout family, at sizes the emulator runs quickly.

knn_classes on CUDA runs GEMM tiles of FEDKERNELS_KNN_CUDA_TILES="rows,cols" (8192 x 8192 by default),
so these tests set small tiles to cross tile edges (C not a multiple of either side, one-row and
one-column tiles, tiles larger than C). On the CPU build the variable is ignored and the same cases
check the CPU op. Under ``--emulate-cuda`` the ops run the CUDA kernels, and the ``emu_direct`` tests
compare the CUDA launchers with the CPU ones bit for bit (knn results, loss and gradient).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import spread_ref


def _emulator_loaded() -> bool:
    try:
        from emu import cuda_emulator

        cuda_emulator.loaded()
        return True
    except (ImportError, RuntimeError):
        return False


def _matrix(kind: str, c: int, d: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "gauss":
        W = torch.randn(c, d, generator=g, dtype=torch.float64)
    elif kind == "ints":  # small integers: many exactly equal distances
        W = torch.randint(-2, 3, (c, d), generator=g).to(torch.float64)
    else:  # duplicated rows: distance-0 ties between distinct classes, overflowing rows
        base = torch.randn(max(1, c // 4), d, generator=g, dtype=torch.float64)
        W = base[torch.randint(0, base.shape[0], (c,), generator=g)]
    return W.to(dtype)


def _knn_with_tiles(W, k, metric, tiles, monkeypatch):
    monkeypatch.setenv("FEDKERNELS_KNN_CUDA_TILES", f"{tiles[0]},{tiles[1]}")
    try:
        return fedkernels.knn_classes(W, k, metric)
    finally:
        monkeypatch.delenv("FEDKERNELS_KNN_CUDA_TILES", raising=False)


def _assert_reference(W, k, metric, got):
    want_d, want_i = spread_ref.knn(W, k, metric)
    assert torch.equal(got[1], want_i)
    tol = 1e-12 if W.dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got[0].double(), want_d, rtol=tol, atol=tol)


@settings(max_examples=25, deadline=None)
@given(
    c=st.integers(2, 90),
    d=st.integers(1, 40),
    data=st.data(),
    kind=st.sampled_from(["gauss", "ints", "dups"]),
    metric=st.sampled_from(["l2", "cosine"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
)
def test_tiles_match_brute_force(c, d, data, kind, metric, dtype, seed):
    k = data.draw(st.one_of(st.just(c - 1), st.integers(0, c - 1)), label="k")
    tiles = (data.draw(st.integers(1, c + 3), label="row tile"), data.draw(st.integers(1, c + 3), label="col tile"))
    W = _matrix(kind, c, d, seed, dtype)
    with pytest.MonkeyPatch.context() as mp:
        _assert_reference(W, k, metric, _knn_with_tiles(W, k, metric, tiles, mp))


@pytest.mark.parametrize("tiles", [(1, 1), (7, 13), (64, 5), (300, 300)])
def test_tile_edges_with_duplicates_d1(tiles, monkeypatch):
    # d = 1 and integer values: most distances tie; every row overflows its slack at k = 12
    W = torch.randint(-3, 4, (101, 1), generator=torch.Generator().manual_seed(1)).float()
    _assert_reference(W, 12, "l2", _knn_with_tiles(W, 12, "l2", tiles, monkeypatch))


@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_k_c_minus_one_small_tiles(metric, monkeypatch):
    W = _matrix("gauss", 37, 5, 3)
    _assert_reference(W, 36, metric, _knn_with_tiles(W, 36, metric, (8, 6), monkeypatch))


def test_more_candidates_than_a_warp(monkeypatch):
    # k + 8 = 48 candidates: the finalize's lanes loop over more than 32 of them
    W = _matrix("gauss", 160, 9, 8)
    _assert_reference(W, 40, "l2", _knn_with_tiles(W, 40, "l2", (33, 70), monkeypatch))


def test_half_input_tiles(monkeypatch):
    W = _matrix("gauss", 150, 12, 4).to(torch.bfloat16)
    _assert_reference(W, 6, "cosine", _knn_with_tiles(W, 6, "cosine", (40, 64), monkeypatch))


@pytest.mark.parametrize("bad", ["12", "0,4", "4,-1", "a,b"])
def test_bad_tile_variable(bad, monkeypatch):
    if not _emulator_loaded():
        pytest.skip("the variable is read by the CUDA launcher only")
    monkeypatch.setenv("FEDKERNELS_KNN_CUDA_TILES", bad)
    with pytest.raises((ValueError, RuntimeError)):
        fedkernels.knn_classes(torch.randn(10, 3), 2)


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_reduced_precision_matmul_stays_exact(precision, monkeypatch):
    # The CUDA launcher widens the key band to the GEMM's real unit roundoff; under the emulator the
    # GEMM is the CPU's (mkldnn setting), on a GPU cuBLAS's. Exact either way, most rows rescanned.
    if not _emulator_loaded():
        pytest.skip("the CPU op's tile path does not read the matmul precision")
    W = _matrix("gauss", 120, 20, 12)
    backends = [torch.backends.mkldnn.matmul, torch.backends.cuda.matmul]
    old = [b.fp32_precision for b in backends]
    try:
        for b in backends:
            b.fp32_precision = precision if b is torch.backends.mkldnn.matmul or precision == "tf32" else "tf32"
        got = _knn_with_tiles(W, 7, "l2", (50, 33), monkeypatch)
    finally:
        for b, o in zip(backends, old, strict=True):
            b.fp32_precision = o
    _assert_reference(W, 7, "l2", got)


def test_loss_sum_over_several_chunks():
    # C > 1024 row terms: the two-pass ordered sum has several chunks (and a partial last one)
    W = _matrix("gauss", 2500, 3, 6) * 0.05
    idx = torch.randint(0, 2500, (2500, 2), generator=torch.Generator().manual_seed(2))
    weight = torch.rand(2500, 2, generator=torch.Generator().manual_seed(3))
    got = fedkernels.spreadout_pair_loss(W.double(), idx, weight, 1.0, "l2")
    dist = (W.double()[:, None, :] - W.double()[idx]).norm(dim=-1)
    want = (weight.double() * torch.clamp(1.0 - dist, min=0) ** 2).sum()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ---- CUDA launchers against the CPU ones, bit for bit (only under --emulate-cuda) ----------------


def _cpu_and_cuda(fn):
    """fn() on the CPU kernels, then on the emulated CUDA kernels."""
    from emu import cuda_emulator

    cpu = fn()
    with cuda_emulator.routed_to_cuda():
        cuda = fn()
    return cpu, cuda


needs_emulator = pytest.mark.skipif(
    "not config.getoption('--emulate-cuda')", reason="compares the emulated CUDA kernels with the CPU ones"
)


@needs_emulator
@pytest.mark.emu_direct
@settings(max_examples=10, deadline=None)
@given(
    c=st.integers(2, 70),
    d=st.integers(1, 70),
    kind=st.sampled_from(["gauss", "ints", "dups"]),
    metric=st.sampled_from(["l2", "cosine"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_knn_cuda_bitwise_equals_cpu(c, d, kind, metric, dtype, seed, data):
    k = data.draw(st.integers(0, c - 1), label="k")
    tiles = (data.draw(st.integers(1, 40), label="row tile"), data.draw(st.integers(1, 40), label="col tile"))
    W = _matrix(kind, c, d, seed, dtype)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEDKERNELS_KNN_CUDA_TILES", f"{tiles[0]},{tiles[1]}")
        (cd, ci), (gd, gi) = _cpu_and_cuda(lambda: fedkernels.knn_classes(W, k, metric))
    assert torch.equal(cd, gd) and torch.equal(ci, gi)


@needs_emulator
@pytest.mark.emu_direct
@settings(max_examples=10, deadline=None)
@given(
    c=st.integers(2, 60),
    d=st.integers(1, 80),
    metric=st.sampled_from(["l2", "cosine"]),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_loss_and_grad_cuda_bitwise_equal_cpu(c, d, metric, dtype, seed, data):
    k = data.draw(st.integers(1, c - 1) if c > 1 else st.just(0), label="k")
    W = _matrix("gauss", c, d, seed, torch.float64).mul(0.3).to(dtype)
    idx = torch.randint(0, c, (c, k), generator=torch.Generator().manual_seed(seed % 1000))
    weight = torch.rand(c, k, generator=torch.Generator().manual_seed(seed % 997))

    def run():
        Wr = W.detach().clone().requires_grad_(True)
        loss = fedkernels.spreadout_pair_loss(Wr, idx, weight, 1.5, metric)
        (g,) = torch.autograd.grad(loss, Wr)
        return loss.detach(), g

    (cl, cg), (gl, gg) = _cpu_and_cuda(run)
    assert torch.equal(cl, gl) and torch.equal(cg, gg)
