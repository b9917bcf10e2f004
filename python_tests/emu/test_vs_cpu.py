"""Each CUDA kernel, run by the emulator, against the CPU kernel of the same op on the same inputs.

Bit-identical where both devices run the same FK_HOST_DEVICE arithmetic in the same order (the
contract of docs/design.md: one kernel body, two launchers); within a stated tolerance where the CUDA
launcher reduces in another fixed order (a CUB block tree, a GEMM per class chunk) — the tolerance
is the reason named beside each case. Runs under `pytest --emulate-cuda` (CI's emulator steps).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests import conftest

pytestmark = [
    pytest.mark.emu_direct,
    pytest.mark.skipif(not conftest.EMULATING, reason="needs the CUDA emulator (pytest --emulate-cuda)"),
]

OPS = torch.ops.fedkernels
CUDA = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)


def on_cuda(op: torch._ops.OpOverload, *args, **kwargs):
    """The op's CUDA kernel (emulated) on host tensors."""
    return op.redispatch(CUDA, *args, **kwargs)


def routed(fn):
    """``fn()`` with every fedkernels op routed to its (emulated) CUDA kernel."""
    from emu import cuda_emulator

    with cuda_emulator.routed_to_cuda():
        return fn()


def assert_same(cpu, cuda) -> None:
    """Bit-identical, NaN where NaN, for tensors or tuples of tensors."""
    cpu = cpu if isinstance(cpu, (tuple, list)) else (cpu,)
    cuda = cuda if isinstance(cuda, (tuple, list)) else (cuda,)
    assert len(cpu) == len(cuda)
    for a, b in zip(cpu, cuda, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(
            a.view(torch.uint8) if a.is_floating_point() else a, b.view(torch.uint8) if b.is_floating_point() else b
        ), (a, b)


def csr(rng: torch.Generator, n: int, p: int, max_labels: int) -> tuple[torch.Tensor, torch.Tensor]:
    counts = torch.randint(0, max_labels + 1, (n,), generator=rng)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    return indptr, torch.randint(0, p, (int(indptr[-1]),), generator=rng)


seeds = st.integers(0, 2**31 - 1)
float_dtypes = st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16])


@given(seed=seeds, n=st.integers(0, 40), r=st.integers(1, 5), b=st.integers(1, 300))
def test_sketch_hashing(seed: int, n: int, r: int, b: int) -> None:
    rng = torch.Generator().manual_seed(seed)
    hf = fedkernels.HashFamily(r, b, seed)
    ids = torch.randint(0, 2**62, (n,), generator=rng)
    assert_same(OPS.hash_buckets.default(ids, hf.params, b), on_cuda(OPS.hash_buckets.default, ids, hf.params, b))
    indptr, indices = csr(rng, n, 1000, 30)
    table = hf.table(1000)
    assert_same(
        OPS.label_hash.default(indptr, indices, table, b), on_cuda(OPS.label_hash.default, indptr, indices, table, b)
    )


@given(
    seed=seeds,
    n=st.integers(0, 12),
    r=st.integers(1, 5),
    b=st.integers(1, 64),
    p=st.integers(1, 400),
    dtype=float_dtypes,
    reduce=st.sampled_from(["mean", "median"]),
    k=st.integers(1, 20),
)
def test_sketch_merge_and_query(seed: int, n: int, r: int, b: int, p: int, dtype, reduce: str, k: int) -> None:
    rng = torch.Generator().manual_seed(seed)
    hf = fedkernels.HashFamily(r, b, seed)
    table, signs = hf.table(p), hf.signs(p)
    logp = torch.nn.functional.logsigmoid(torch.randn(r, n, b, generator=rng)).to(dtype)
    assert_same(OPS.bucket_merge.default(logp, table, reduce), on_cuda(OPS.bucket_merge.default, logp, table, reduce))
    k = min(k, p)
    assert_same(
        OPS.bucket_merge_topk.default(logp, table, k, reduce),
        on_cuda(OPS.bucket_merge_topk.default, logp, table, k, reduce),
    )
    grad = torch.randn(n, p, generator=rng).to(dtype)
    assert_same(
        OPS.bucket_merge_backward.default(grad, table, b), on_cuda(OPS.bucket_merge_backward.default, grad, table, b)
    )
    x = torch.randn(n, p, generator=rng).to(dtype)
    assert_same(OPS.count_sketch.default(x, table, signs, b), on_cuda(OPS.count_sketch.default, x, table, signs, b))
    m = torch.randn(n, r, b, generator=rng).to(dtype)
    assert_same(
        OPS.count_sketch_query.default(m, table, signs, reduce),
        on_cuda(OPS.count_sketch_query.default, m, table, signs, reduce),
    )


@given(seed=seeds, clients=st.integers(0, 6), p=st.integers(20, 500), m=st.integers(0, 8))
def test_sampled_negatives(seed: int, clients: int, p: int, m: int) -> None:
    rng = torch.Generator().manual_seed(seed)
    positives = torch.randperm(p, generator=rng)[: p // 3]
    assert_same(
        OPS.sample_negatives.default(positives, p, m, seed),
        on_cuda(OPS.sample_negatives.default, positives, p, m, seed),
    )
    rows = [
        torch.unique(torch.randint(0, p, (int(torch.randint(0, 6, (1,), generator=rng)),), generator=rng))
        for _ in range(clients)
    ]
    indptr = torch.tensor([0] + [len(r) for r in rows]).cumsum(0)
    indices = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
    assert_same(
        fedkernels.sample_negatives_batched(indptr, indices, p, m, seed),
        routed(lambda: fedkernels.sample_negatives_batched(indptr, indices, p, m, seed)),
    )


@given(seed=seeds, n=st.integers(1, 30), t=st.integers(0, 60), d=st.integers(1, 1100), dtype=float_dtypes)
def test_scatter_rows_mean(seed: int, n: int, t: int, d: int, dtype) -> None:
    rng = torch.Generator().manual_seed(seed)
    out = torch.randn(n, d, generator=rng).to(dtype)
    idx = torch.randint(0, n, (t,), generator=rng)
    src = torch.randn(t, d, generator=rng).to(dtype)
    w = torch.rand(t, generator=rng) + 0.1
    a, b = out.clone(), out.clone()
    OPS.scatter_rows_mean.default(a, idx, src, w)
    on_cuda(OPS.scatter_rows_mean.default, b, idx, src, w)
    assert_same(a, b)


@given(
    seed=seeds,
    n=st.integers(0, 50),
    s=st.integers(1, 300),
    d=st.integers(1, 40),
    bias=st.booleans(),
    chunk=st.sampled_from([0, 7, 64]),
)
def test_linear_cross_entropy(seed: int, n: int, s: int, d: int, bias: bool, chunk: int) -> None:
    # The forward's per-chunk GEMM is the same at::mm on both, but the CPU kernel blocks classes its
    # own way: losses agree to float32 rounding of a log-sum-exp, not bit for bit.
    rng = torch.Generator().manual_seed(seed)
    h, W = torch.randn(n, d, generator=rng), torch.randn(s, d, generator=rng)
    target = torch.randint(0, s, (n,), generator=rng)
    b = torch.randn(s, generator=rng) if bias else None
    cpu = OPS.linear_cross_entropy.default(h, W, target, b, 1.0, -100, "none", chunk)
    cuda = on_cuda(OPS.linear_cross_entropy.default, h, W, target, b, 1.0, -100, "none", chunk)
    for x, y in zip(cpu, cuda, strict=True):
        torch.testing.assert_close(x, y, rtol=2e-6, atol=2e-6)


@given(
    seed=seeds,
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=8),
    dtype=float_dtypes,
    fraction=st.floats(0.01, 1.0),
)
def test_select_family(seed: int, sizes: list[int], dtype, fraction: float) -> None:
    rng = torch.Generator().manual_seed(seed)
    old = [torch.randn(n, generator=rng).to(dtype) for n in sizes]
    new = [o + torch.randn(o.shape, generator=rng).to(dtype) for o in old]
    # Norms: CUB's block tree (CUDA) and 16 lanes (CPU) sum in different fixed orders.
    torch.testing.assert_close(
        on_cuda(OPS.delta_norms.default, new, old, False),
        OPS.delta_norms.default(new, old, False),
        rtol=1e-5,
        atol=1e-6,
    )
    norms = OPS.delta_norms.default(new, old, False)
    gaps = norms.sort().values.diff().abs()
    if norms.numel() < 2 or float(gaps.min()) > 1e-3 * float(norms.max()):  # no near-tie the order could flip
        assert_same(
            OPS.select_topk_tensors.default(new, old, fraction, False),
            on_cuda(OPS.select_topk_tensors.default, new, old, fraction, False),
        )
    # Masked averaging: each element is the same weighted sum in client order on both devices.
    picked = [i for i in range(len(sizes)) if i % 2 == 0]
    sent = [
        (torch.tensor(picked, dtype=torch.long), [new[i] for i in picked], 2.0),
        (torch.tensor(list(range(len(sizes))), dtype=torch.long), list(old), 1.0),
    ]
    cpu_dst, cuda_dst = [o.clone() for o in old], [o.clone() for o in old]
    fedkernels.masked_weighted_average(cpu_dst, sent)
    routed(lambda: fedkernels.masked_weighted_average(cuda_dst, sent))
    for a, b in zip(cpu_dst, cuda_dst, strict=True):
        assert_same(a, b)


@given(
    seed=seeds,
    rows=st.integers(0, 5),
    d=st.integers(1, 300),
    lam=st.floats(0.0, 3.0),
    anchored=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_prox_tv1d(seed: int, rows: int, d: int, lam: float, anchored: bool, dtype) -> None:
    rng = torch.Generator().manual_seed(seed)
    z = torch.randn(rows, d, generator=rng).to(dtype)
    lam_t = torch.tensor(lam, dtype=torch.float64)
    cpu = OPS.prox_tv1d.default(z, lam_t, anchored, 0)
    cuda = on_cuda(OPS.prox_tv1d.default, z, lam_t, anchored, 0)
    assert_same(cpu, cuda)  # the same sequential FK_HOST_DEVICE solver per row


@settings(max_examples=15)
@given(
    seed=seeds,
    d=st.integers(2048, 3 * 2048 + 5),
    lam=st.sampled_from([1e-3, 0.01, 0.1, 0.25, 1.0, 100.0]),
    integers=st.booleans(),
    anchored=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_prox_tv1d_long_rows(seed: int, d: int, lam: float, integers: bool, anchored: bool, dtype) -> None:
    # Rows of several scan chunks (kTvChunk = 2048): the host's one-sample-piece loop (SSE selects) and
    # NaN/inf test per chunk against the device's scalar loop and per-sample test. Integer rows with lam
    # in quarters make the step tests tie exactly.
    rng = torch.Generator().manual_seed(seed)
    z = torch.randn(2, d, generator=rng, dtype=torch.float64)
    z = (z * 2).round() if integers else z
    lam_t = torch.tensor([lam, 4 * lam], dtype=torch.float64)
    cpu = OPS.prox_tv1d.default(z.to(dtype), lam_t, anchored, 0)
    cuda = on_cuda(OPS.prox_tv1d.default, z.to(dtype), lam_t, anchored, 0)
    assert_same(cpu, cuda)


@settings(max_examples=15)
@given(
    seed=seeds,
    d=st.integers(300, 3000),
    lam=st.sampled_from([30.0, 100.0, 1000.0]),
    sign=st.sampled_from([1.0, -1.0]),
    anchored=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_prox_tv1d_funnel_resume(seed: int, d: int, lam: float, sign: float, anchored: bool, dtype) -> None:
    # Random walks at large lam: the direct scan runs over budget part way and the funnel solves the rest
    # from its last bend (on either wall: the sign flip swaps them); host and device hand over alike.
    rng = torch.Generator().manual_seed(seed)
    z = (sign * torch.randn(3, d, generator=rng, dtype=torch.float64).cumsum(1)).to(dtype)
    lam_t = torch.tensor(lam, dtype=torch.float64)
    cpu = OPS.prox_tv1d.default(z, lam_t, anchored, 0)
    cuda = on_cuda(OPS.prox_tv1d.default, z, lam_t, anchored, 0)
    assert_same(cpu, cuda)


@given(
    seed=seeds,
    c=st.integers(2, 80),
    d=st.integers(1, 70),
    k=st.integers(1, 12),
    metric=st.sampled_from(["l2", "cosine"]),
    dtype=float_dtypes,
)
def test_spread_family(seed: int, c: int, d: int, k: int, metric: str, dtype) -> None:
    rng = torch.Generator().manual_seed(seed)
    W = torch.randn(c, d, generator=rng).to(dtype)
    k = min(k, c - 1)
    assert_same(OPS.knn_classes.default(W, k, metric), on_cuda(OPS.knn_classes.default, W, k, metric))
    idx = OPS.knn_classes.default(W, k, metric)[1]
    weight = torch.rand(c, k, generator=rng)
    m = min(3, c)  # the pair-weight CSR needs strictly sorted rows: m distinct columns per row
    indptr = torch.arange(0, m * c + 1, m)
    indices = torch.stack([torch.randperm(c, generator=rng)[:m].sort().values for _ in range(c)]).flatten()
    values = torch.rand(m * c, generator=rng)
    assert_same(
        OPS.pair_weight_gather.default(indptr, indices, values, idx),
        on_cuda(OPS.pair_weight_gather.default, indptr, indices, values, idx),
    )
    loss_cpu = OPS.spreadout_pair_loss.default(W, idx, weight, 1.0, metric)
    loss_cuda = on_cuda(OPS.spreadout_pair_loss.default, W, idx, weight, 1.0, metric)
    torch.testing.assert_close(loss_cuda, loss_cpu, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)
    g = torch.tensor(1.5, dtype=loss_cpu.dtype)
    torch.testing.assert_close(
        on_cuda(OPS.spreadout_pair_loss_backward.default, g, W, idx, weight, 1.0, metric),
        OPS.spreadout_pair_loss_backward.default(g, W, idx, weight, 1.0, metric),
        rtol=1e-5,
        atol=1e-6,
    )


@settings(max_examples=12)
@given(
    seed=seeds,
    n=st.integers(0, 9),
    d=st.integers(0, 24),
    p=st.integers(1, 5000),
    k=st.sampled_from([1, 5, 33, 300, 2100]),
    bias=st.booleans(),
    tile=st.sampled_from([None, "2048"]),
    nan=st.booleans(),
)
@example(seed=1, n=3, d=5, p=5000, k=2100, bias=True, tile="2048", nan=False)  # 3 tiles, k > a segment
@example(seed=2, n=2, d=3, p=4500, k=33, bias=False, tile="2048", nan=True)  # 3 tiles, ties, a NaN row
@example(seed=3, n=1, d=2, p=4096, k=5, bias=False, tile=None, nan=False)  # 1 row: splits, then their merge
def test_linear_topk(seed: int, n: int, d: int, p: int, k: int, bias: bool, tile, nan: bool) -> None:
    """Small-integer inputs: every score is exact in any GEMM order, so the CUDA kernel (cuBLAS tiles,
    block merges; FEDKERNELS_TOPK_CUDA_TILE=2048: several tiles) and the CPU kernel must give the same
    bits, ties and NaN rows included."""
    import os

    k = min(k, p)
    rng = torch.Generator().manual_seed(seed)
    h = torch.randint(-3, 4, (n, d), generator=rng).float()
    W = torch.randint(-3, 4, (p, d), generator=rng).float()
    b = torch.randint(-2, 3, (p,), generator=rng).float() if bias else None
    if nan and n > 0 and d > 0:
        h[0, 0] = float("nan")
    if tile is not None:
        os.environ["FEDKERNELS_TOPK_CUDA_TILE"] = tile
    try:
        cuda = on_cuda(OPS.linear_topk.default, h, W, b, k, 0.5)
    finally:
        os.environ.pop("FEDKERNELS_TOPK_CUDA_TILE", None)
    assert_same(OPS.linear_topk.default(h, W, b, k, 0.5), cuda)


@settings(max_examples=8)
@given(seed=seeds, n=st.integers(1, 6), d=st.integers(1, 40), p=st.integers(1, 3000), bf16=st.booleans())
def test_linear_topk_floats(seed: int, n: int, d: int, p: int, bf16: bool) -> None:
    """Random floats: the CUDA scores come from another GEMM order, so values agree to float32 rounding
    of a d-term sum and the classes agree wherever the scores are apart by more than that."""
    rng = torch.Generator().manual_seed(seed)
    dtype = torch.bfloat16 if bf16 else torch.float32
    h, W = torch.randn(n, d, generator=rng).to(dtype), torch.randn(p, d, generator=rng).to(dtype)
    k = min(7, p)
    cv, ci = OPS.linear_topk.default(h, W, None, k, 1.0)
    gv, gi = on_cuda(OPS.linear_topk.default, h, W, None, k, 1.0)
    tol = 4 * d * 2.0**-24 * float((h.float().abs() @ W.float().abs().T).max()) + 1e-30
    torch.testing.assert_close(gv, cv, rtol=0, atol=tol)
    full = (h.double() @ W.double().T).sort(1, descending=True).values
    gap = (full[:, :-1] - full[:, 1:]) if p > 1 else torch.full((n, 1), float("inf"))
    apart = torch.cat([torch.full((n, 1), float("inf")), gap], 1)[:, :k] > 2 * tol
    apart &= torch.cat([gap, torch.full((n, 1), float("inf"))], 1)[:, :k] > 2 * tol
    assert torch.equal(gi[apart], ci[apart])
