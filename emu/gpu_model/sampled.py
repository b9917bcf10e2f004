"""FedSS (csrc/sampled): the negative sampler, linear_cross_entropy (recorded at two small s and
extrapolated), scatter_rows_mean.
"""

from __future__ import annotations

import time

import torch

import fedkernels

from .common import B, OpModel, grouped, record
from .configs import LABELS_PER_SAMPLE


def bytes_sample_rows(clients, npos, m):
    """each client's positives read once (8 per id, plus its indptr entry) and its m int64 negatives written once."""
    return 8 * npos + 8 * (clients + 1) + 8 * clients * m


def bytes_lce_forward_chunks(n, s, launches, es):
    """every chunk's logits [N, cols] read once (N s over all chunks) and bias (s); per launch target read and run
    max/sum read+written (24 N); target logit written once (4 N)."""
    return es * (n * s + s) + launches * 24 * n + 4 * n


def bytes_lce_forward_finish(n, es):
    """running max, running sum, target logit (3 es N) and target (8 N) read; loss and lse (2 es N) written."""
    return n * (5 * es + 8)


def bytes_lce_gemm_forward(n, s, d, launches, es):
    """cuBLAS z = h W_c^T per chunk: h read per chunk (N d), W read once over all chunks (s d), logits written (N s)."""
    return es * (launches * n * d + s * d + n * s)


def bytes_lce_backward_chunks(n, s, launches, es):
    """every chunk's logits read and d/dlogits written in place (2 N s), bias (s); per launch target (8 N) and lse,
    grad loss, grad lse (3 es N) read."""
    return es * (2 * n * s + s) + launches * n * (8 + 3 * es)


def bytes_lce_gemm_backward(n, s, d, launches, es, bias):
    """per chunk z = h W_c^T, grad_h += z W_c, grad_W_c = z^T h (+ bias grad z.sum(0)): launches 4 N d + 4 s d + 3 N s
    (+ N s + s), plus zero-filled grad_h, grad_W (N d + s d)."""
    return es * (launches * 4 * n * d + 4 * s * d + 3 * n * s + (n * s + s if bias else 0) + n * d + s * d)


def bytes_segment_weight_sum(u, t):
    """segment bounds (8 (U+1)), the permutation (8 T) and the float32 weights (4 T) read; one float per output row
    written (4 U)."""
    return 8 * (u + 1) + 8 * t + 4 * t + 4 * u


def bytes_scatter_rows_mean(u, t, d, es):
    """every source row read once (T d es) with its position and weight (12 T); per output row its id, bounds, weight
    sum read (20 U) and the row written (U d es)."""
    return t * d * es + 12 * t + 20 * u + u * d * es


def torch_sample_negatives(clients, num_classes, npos, m):
    """per client: randperm(num_classes), ~isin(perm, positives), perm[keep], sort of the first m (the model's
    composition; no bench times one)."""
    c = num_classes
    per = 8 * c + (8 * c + c) + 2 * c + (9 * c + 8 * c) + 24 * m  # randperm, isin, ~, perm[keep], sort
    return clients * per + 8 * npos


def torch_lce_forward(n, s, d, es):
    """bench F.cross_entropy(h @ W.T + b, t): GEMM writes [N, s], + bias reads and writes it, log_softmax reads and
    writes it, nll gathers N."""
    return es * (n * d + s * d + n * s) + es * (2 * n * s + s) + es * 2 * n * s + 8 * n + es * n


def torch_lce_backward(n, s, d, es):
    """autograd of it: nll backward writes [N, s], log_softmax backward reads 2 and writes 1, bias grad reads it, both
    GEMMs read it."""
    return es * (n * s + 3 * n * s + n * s + s + (n * s + s * d + n * d) + (n * s + n * d + s * d))


def torch_scatter_rows_mean(n, u, t, d, es):
    """bench composition: src * w, zeros_like(out), index_add_ rows, zeros + index_add_ weights, unique, gather
    num/den, divide, index_put into out."""
    return (
        (2 * t * d * es + 4 * t)
        + n * d * es
        + (t * d * es + 8 * t + 2 * u * d * es)
        + 4 * n
        + (12 * t + 8 * u)
        + (8 * t + 8 * u)
        + (8 * u + 2 * u * d * es)
        + (16 * u)
        + (2 * u * d * es + 4 * u)
        + (8 * u + 2 * u * d * es)
    )


def floor_lce_forward(n, s, d, es):
    """h, W, bias read once (es (N d + s d + s)), target (8 N); lse written (es N), loss a scalar."""
    return es * (n * d + s * d + s + n) + 8 * n


def floor_lce_backward(n, s, d, es):
    """h, W, bias, lse, grad loss, grad lse, target read; grad h, grad W, grad bias written."""
    return es * (2 * n * d + 2 * s * d + 2 * s + 3 * n) + 8 * n


def sampler_models(num_classes: int, n: int, m_neg: int, clients: int) -> list[OpModel]:
    g = torch.Generator().manual_seed(1)
    out = []
    pos = torch.unique(torch.randint(0, num_classes, (n * LABELS_PER_SAMPLE,), generator=g))
    m = OpModel("sample_negatives", f"classes={num_classes} positives={pos.numel()} m={m_neg}")
    m.launches = record(lambda: fedkernels.sample_negatives(pos, num_classes, m_neg, seed=0))
    m.kernel_bytes["sample_rows_kernel"] = B(bytes_sample_rows, 1, pos.numel(), m_neg)
    m.floor = m.kernel_bytes["sample_rows_kernel"]
    m.torch = B(torch_sample_negatives, 1, num_classes, pos.numel(), m_neg)
    m.note = "launcher also sorts the [1, m] output on the device (not modelled)"
    out.append(m)

    rows = [torch.unique(torch.randint(0, num_classes, (n * LABELS_PER_SAMPLE,), generator=g)) for _ in range(clients)]
    indptr = torch.tensor([0] + [r.numel() for r in rows]).cumsum(0)
    indices = torch.cat(rows)
    m = OpModel(
        "sample_negatives_batched", f"classes={num_classes} clients={clients} positives={indices.numel()} m={m_neg}"
    )
    m.launches = record(lambda: fedkernels.sample_negatives_batched(indptr, indices, num_classes, m_neg, seed=0))
    m.kernel_bytes["sample_rows_kernel"] = B(bytes_sample_rows, clients, indices.numel(), m_neg)
    m.floor = m.kernel_bytes["sample_rows_kernel"]
    m.torch = B(torch_sample_negatives, clients, num_classes, indices.numel(), m_neg)
    m.note = "launcher also sorts the [clients, m] output on the device (not modelled)"
    out.append(m)
    return out


def _lce_record(n: int, s: int, d: int) -> tuple[list, list]:
    """Launches of one forward and one backward at (n, s, d), float32 with bias."""
    g = torch.Generator().manual_seed(s)
    h = torch.randn(n, d, generator=g) / d**0.5
    W = torch.randn(s, d, generator=g)
    bias = torch.randn(s, generator=g)
    t = torch.randint(0, s, (n,), generator=g)
    fwd = record(lambda: torch.ops.fedkernels.linear_cross_entropy(h, W, t, bias, 1.0, -100, "mean", 0))
    lse, gl, gs = torch.zeros(n), torch.full((n,), 1.0 / n), torch.zeros(n)
    bwd = record(lambda: torch.ops.fedkernels.linear_cross_entropy_backward(h, W, t, bias, lse, gl, gs, 1.0, -100, 0))
    return fwd, bwd


def extrapolate(at1: list, at2: list, s1: int, s2: int, s: int) -> list:
    """Launches at s from launches at s1 and s2: one shape per kernel (checked), counts affine in s."""
    g1, g2 = grouped(at1), grouped(at2)
    if set(g1) != set(g2):
        raise RuntimeError(f"linear_cross_entropy launches different kernels at s={s1} and s={s2}")
    out = []
    for name in g1:
        shapes = set(g1[name]) | set(g2[name])
        if len(shapes) != 1:
            raise RuntimeError(f"{name}: launch shape depends on s ({sorted(shapes)}): cannot extrapolate")
        c1, c2 = len(g1[name]), len(g2[name])
        if (c2 - c1) * (s - s1) % (s2 - s1):
            raise RuntimeError(f"{name}: launch count not affine in s")
        count = c1 + (c2 - c1) * (s - s1) // (s2 - s1)
        grid, block = shapes.pop()
        out += [(name, grid, block)] * count
    return out


def lce_models(n: int, s: int, d: int, exact: bool = False) -> list[OpModel]:
    es = 4
    t0 = time.perf_counter()
    if exact:
        fwd, bwd = _lce_record(n, s, d)
        how = f"recorded at s={s} (execute=False, {time.perf_counter() - t0:.1f} s of host GEMMs)"
    else:
        s1, s2 = 2048, 4096  # 4 and 8 chunks of the default 512 classes (exact for any chunk size dividing 2048)
        f1, b1 = _lce_record(n, s1, d)
        f2, b2 = _lce_record(n, s2, d)
        fwd, bwd = extrapolate(f1, f2, s1, s2, s), extrapolate(b1, b2, s1, s2, s)
        how = (
            f"recorded at s={s1} and s={s2} (execute=False, {time.perf_counter() - t0:.1f} s of host GEMMs), "
            f"launch counts extrapolated to s={s}"
        )
    cfg = f"N={n} s={s} d={d} f32 bias"
    out = []
    m = OpModel("linear_cross_entropy", cfg, launches=fwd, how=how)
    chunks = len(grouped(fwd).get("lce_forward_chunk_kernel", []))
    if chunks:
        m.kernel_bytes["lce_forward_chunk_kernel"] = B(bytes_lce_forward_chunks, n, s, chunks, es)
        m.extra_rows.append(("at::mm (cuBLAS, not recorded)", chunks, B(bytes_lce_gemm_forward, n, s, d, chunks, es)))
        m.flops["at::mm (cuBLAS, not recorded)"] = 2 * n * s * d
    m.kernel_bytes["lce_forward_finish_kernel"] = B(bytes_lce_forward_finish, n, es)
    m.floor = B(floor_lce_forward, n, s, d, es)
    m.torch = B(torch_lce_forward, n, s, d, es)
    m.note = (
        f"h ({n * d * es / 1e6:.1f} MB) is re-read by every chunk's GEMM ({chunks * n * d * es / 1e9:.2f} GB "
        "counted; L2 hits on an H100); loss.sum() and the mean on the device are not modelled"
    )
    out.append(m)
    m = OpModel("linear_cross_entropy_backward", cfg, launches=bwd, how=how)
    chunks = len(grouped(bwd).get("lce_backward_chunk_kernel", []))
    if chunks:
        m.kernel_bytes["lce_backward_chunk_kernel"] = B(bytes_lce_backward_chunks, n, s, chunks, es)
        m.extra_rows.append(
            ("at::mm/addmm (cuBLAS, not recorded)", 3 * chunks, B(bytes_lce_gemm_backward, n, s, d, chunks, es, True))
        )
        m.flops["at::mm/addmm (cuBLAS, not recorded)"] = 3 * 2 * n * s * d
    m.floor = B(floor_lce_backward, n, s, d, es)
    m.note = (
        f"h and grad_h ({n * d * es / 1e6:.1f} MB each) are re-read (grad_h also rewritten) by every chunk's "
        f"GEMMs ({chunks * 4 * n * d * es / 1e9:.2f} GB counted; L2 hits on an H100)"
    )
    m.torch = B(torch_lce_backward, n, s, d, es)
    out.append(m)
    return out


def scatter_models(n: int, t: int, d: int) -> list[OpModel]:
    g = torch.Generator().manual_seed(n + t)
    out_t = torch.randn(n, d, generator=g)
    idx = torch.randint(0, n, (t,), generator=g)
    src = torch.randn(t, d, generator=g)
    w = torch.rand(t, generator=g) + 0.1
    u = int(torch.unique(idx).numel())
    m = OpModel("scatter_rows_mean", f"n={n} T={t} d={d} rows={u} f32", how="execute=True (host reads the weight sums)")
    t0 = time.perf_counter()
    m.launches = record(lambda: fedkernels.scatter_rows_mean(out_t, idx, src, w), execute=True)
    m.how += f", {time.perf_counter() - t0:.1f} s emulated"
    m.kernel_bytes["segment_weight_sum_kernel"] = B(bytes_segment_weight_sum, u, t)
    m.kernel_bytes["scatter_rows_mean_kernel"] = B(bytes_scatter_rows_mean, u, t, d, 4)
    m.floor = (t * (4 * d + 12) + u * 4 * d, "sources, ids and weights read once; every named output row written once.")
    m.torch = B(torch_scatter_rows_mean, n, u, t, d, 4)
    m.note = "the launcher's row segmentation (a device sort of idx) is not modelled"
    return [m]
