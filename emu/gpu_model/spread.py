"""Spreadout (csrc/spread): knn_classes, the spreadout pair loss and its backward, pair_weight_gather."""

from __future__ import annotations

import torch

import fedkernels

from .common import B, OpModel, record, why
from .configs import PAIRS_PER_CLASS, SPREAD_K, SPREAD_MARGIN

KNN_SLACK = 8  # spread.h candidate_capacity(k) = k + 8
KNN_ROW_TILE, KNN_COL_TILE = 10240, 8192  # spread_cuda.cpp kRowTile, kColTile (FEDKERNELS_KNN_CUDA_TILES unset)


def bytes_row_norms(c, d, es):
    """W read once (C d es); one float64 norm per row written (8 C)."""
    return c * d * es + 8 * c


def bytes_knn_tile_merge(c, cap, acc, col_tiles):
    """The [C, C] float32 products read once (the GEMMs wrote them), column norms (8 C per row tile, counted once), and
    each row's candidate list (cap keys and int64 ids, size, flag) read and written once per column tile."""
    return 4 * c * c + 8 * c + col_tiles * c * (2 * cap * (acc + 8) + 18)


def bytes_knn_gemm(c, d, row_tiles, es):
    """cuBLAS products per (row tile, column tile): W's rows read once, all of W re-read per row tile, [C, C] float32
    products written once."""
    return c * d * es + row_tiles * c * d * es + 4 * c * c


def bytes_knn_finalize(c, d, cap, k, es, acc):
    """W read once (candidate rows counted as cache hits), norms, cap candidate ids, sizes and flags read; k distances
    and int64 ids written per row."""
    return c * d * es + 8 * c + 8 * c * cap + 9 * c + c * k * (acc + 8)


def bytes_pair_weight_gather(c, k, nnz):
    """the CSR pair weights read once (8 (C+1) + 12 nnz) and the neighbour ids (8 C k); float32 [C, k] written."""
    return 8 * (c + 1) + 12 * nnz + 8 * c * k + 4 * c * k


def bytes_pair_terms(c, d, k, es, coefs):
    """W read once (neighbour rows counted as cache hits), norms (8 C), neighbour ids and weights (12 C k); a float64
    per row (forward) or per pair (backward) written."""
    return c * d * es + 8 * c + 12 * c * k + (8 * c * k if coefs else 8 * c)


def bytes_ordered_sum(c):
    """C float64 row sums read once; one float64 written."""
    return 8 * c + 8


def bytes_pair_grad(c, d, k, es):
    """W read once, norms (8 C), neighbour ids and coefficients (16 C k), reverse order and bounds (8 C k + 8 (C+1))
    read; grad W written once."""
    return 2 * c * d * es + 8 * c + 24 * c * k + 8 * (c + 1)


def floor_knn(c, d, k, es, acc):
    """W read once; k distances and int64 ids written per row."""
    return c * d * es + c * k * (acc + 8)


def floor_spread_forward(c, d, es):
    """W read once (neighbour selection included); a scalar written."""
    return c * d * es + 8


def floor_spread_backward(c, d, k, es):
    """W and the neighbour table (8 C k) read once; grad W written once."""
    return 2 * c * d * es + 8 * c * k


def torch_knn(c, d, k, es):
    """bench composition_knn: cdist writes [C, C] (W read twice), fill_diagonal_, topk reads [C, C] and writes k values
    and ids."""
    return 2 * c * d * es + 4 * c * c + 4 * c + 4 * c * c + 12 * c * k


def torch_pair_weight_gather(c, k, nnz):
    """PairWeights.dense() then gather(1, idx): ones [C, C] written, repeat_interleave and index_put of nnz values, [C,
    k] gathered."""
    return 4 * c * c + (8 * (c + 1) + 16 * nnz) + (16 * nnz + 4 * nnz) + (8 * c * k + 4 * c * k + 4 * c * k)


def torch_spread_forward(c, d, k, es):
    """bench composition_loss_fwd_bwd forward: cdist [C, C], full + diag ([C, C] written), D + diag (2 read, 1
    written), topk, hinge on [C, k]."""
    return 2 * c * d * es + 4 * c * c + 4 * c + 4 * c * c + 12 * c * c + 4 * c * c + 12 * c * k + 28 * c * k


def torch_spread_backward(c, d, k, es):
    """its backward: topk backward zero-fills [C, C] and scatters, cdist backward reads grad and distances for each of
    its two inputs (W twice), sums the two [C, d]."""
    return 4 * c * c + 12 * c * k + 2 * (8 * c * c + 2 * c * d * es) + 3 * c * d * es


def spread_models(c: int, d: int, with_pair_weights: bool) -> list[OpModel]:
    es, acc, k = 4, 4, SPREAD_K
    cap = min(k + KNN_SLACK, c - 1)
    g = torch.Generator().manual_seed(c + d)
    W = torch.randn(c, d, generator=g) / d**0.5  # real values: the launcher checks W is finite
    cfg = f"C={c} d={d} k={k} f32"
    out = []
    m = OpModel("knn_classes", cfg)
    m.launches = record(lambda: fedkernels.knn_classes(W, k))
    # The launcher runs one at::mm (cuBLAS) per (row tile, column tile), then a merge launch per tile.
    row_tiles, col_tiles = -(-c // KNN_ROW_TILE), -(-c // KNN_COL_TILE)
    m.kernel_bytes["row_norms_kernel"] = B(bytes_row_norms, c, d, es)
    m.kernel_bytes["knn_tile_merge_kernel"] = B(bytes_knn_tile_merge, c, cap, acc, col_tiles)
    m.kernel_bytes["knn_finalize_kernel"] = B(bytes_knn_finalize, c, d, cap, k, es, acc)
    gemm = "at::mm (cuBLAS, not recorded)"
    m.extra_rows.append((gemm, row_tiles * col_tiles, B(bytes_knn_gemm, c, d, row_tiles, es)))
    m.flops[gemm] = 2 * c * c * d
    m.floor = B(floor_knn, c, d, k, es, acc)
    m.torch = B(torch_knn, c, d, k, es)
    m.note = "the tile GEMMs are compute-bound (2 C^2 d flops) and write the [C, C] products the merge reads back"
    out.append(m)
    knn_launches = m.launches

    Wv = W
    idx = (torch.arange(c)[:, None] + torch.randint(1, c, (c, k), generator=g)) % c  # valid, never self
    ones = torch.ones(c, k)
    pair_fwd = record(lambda: torch.ops.fedkernels.spreadout_pair_loss(Wv, idx, ones, SPREAD_MARGIN, "l2"))
    m = OpModel("spreadout_loss", cfg + " FedAwS", how="execute=False, recorded as knn_classes + spreadout_pair_loss")
    m.launches = knn_launches + pair_fwd
    for kname in ("row_norms_kernel", "knn_tile_merge_kernel", "knn_finalize_kernel"):
        m.kernel_bytes[kname] = out[0].kernel_bytes[kname]
    m.extra_rows = list(out[0].extra_rows)
    # row_norms runs twice (knn, pair loss): its bytes function covers one launch, so count both
    n_norms = sum(1 for name, _, _ in m.launches if name == "row_norms_kernel")
    nb, w = bytes_row_norms(c, d, es), why(bytes_row_norms)
    m.kernel_bytes["row_norms_kernel"] = (n_norms * nb, f"{w} (x{n_norms} launches)")
    m.kernel_bytes["pair_terms_kernel"] = B(bytes_pair_terms, c, d, k, es, False)
    m.kernel_bytes["ordered_sum_kernel"] = B(bytes_ordered_sum, c)
    m.flops[gemm] = 2 * c * c * d
    m.floor = B(floor_spread_forward, c, d, es)
    m.torch = B(torch_spread_forward, c, d, k, es)
    out.append(m)

    gout = torch.tensor(1.0)
    m = OpModel("spreadout_loss backward", cfg, how="execute=False (spreadout_pair_loss_backward)")
    m.launches = record(
        lambda: torch.ops.fedkernels.spreadout_pair_loss_backward(gout, Wv, idx, ones, SPREAD_MARGIN, "l2")
    )
    n_norms = sum(1 for name, _, _ in m.launches if name == "row_norms_kernel")
    m.kernel_bytes["row_norms_kernel"] = (n_norms * nb, f"{w} (x{n_norms} launches)")
    m.kernel_bytes["pair_terms_kernel"] = B(bytes_pair_terms, c, d, k, es, True)
    m.kernel_bytes["pair_grad_kernel"] = B(bytes_pair_grad, c, d, k, es)
    m.floor = B(floor_spread_backward, c, d, k, es)
    m.torch = B(torch_spread_backward, c, d, k, es)
    m.note = "the launcher's reverse-pair stable sort is not modelled"
    out.append(m)

    if with_pair_weights:
        rows = torch.arange(c).repeat_interleave(PAIRS_PER_CLASS)
        cols = (rows + torch.randint(1, c, (rows.numel(),), generator=g)) % c
        key = torch.unique(rows * c + cols)
        pw = fedkernels.ops.spread.PairWeights.from_pairs(key // c, key % c, torch.rand(key.numel(), generator=g), c)
        m = OpModel("pair_weight_gather", f"C={c} k={k} nnz={pw.nnz}")
        m.launches = record(lambda: fedkernels.ops.spread.pair_weight_gather(pw, idx))
        m.kernel_bytes["pair_weight_gather_kernel"] = B(bytes_pair_weight_gather, c, k, pw.nnz)
        m.floor = m.kernel_bytes["pair_weight_gather_kernel"]
        m.torch = B(torch_pair_weight_gather, c, k, pw.nnz)
        out.append(m)
    return out
