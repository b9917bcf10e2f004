"""The fused linear top-k (csrc/topk): linear_topk."""

from __future__ import annotations

import torch

import fedkernels

from .common import B, OpModel, grouped, record
from .configs import TOPK_K


def bytes_linear_topk_gemm(n, p, d, tiles, es):
    """cuBLAS products per tile of classes: h re-read per tile, W read once, the [N, p] float32 scores written once
    (tile by tile into one reused buffer)."""
    return tiles * n * d * es + p * d * es + 4 * n * p


def bytes_linear_topk_tile(n, p, k, splits, tiles):
    """The scores read once; each item's k-entry list (8-byte composites) read and written once per tile (an upper
    bound: a tile without candidates for an item writes nothing)."""
    return 4 * n * p + tiles * n * splits * k * 8 * 2


def bytes_linear_topk_merge(n, k, splits):
    """Each row's split lists read once, the merged list written once."""
    return n * splits * k * 8 + n * k * 8


def bytes_linear_topk_finish(n, k):
    """k composites read per row; k float32 values and int64 ids written."""
    return n * k * (8 + 12)


def floor_linear_topk(n, p, d, k, es):
    """h and W read once; k float32 values and int64 ids written per row."""
    return n * d * es + p * d * es + n * k * 12


def torch_linear_topk(n, p, d, k, es):
    """torch.topk(h @ W.T, k): the GEMM reads h and W and writes [N, p]; topk reads [N, p] and writes k values and
    ids."""
    return n * d * es + p * d * es + 2 * 4 * n * p + n * k * 12


def topk_models(p: int, d: int, n: int) -> list[OpModel]:
    """linear_topk's launches are recorded at d = 1 (the launcher's at::mm runs on the CPU in record
    mode; no launch shape depends on d) and modelled at the real d."""
    es, k = 4, TOPK_K
    g = torch.Generator().manual_seed(p + n)
    h1, W1 = torch.randn(n, 1, generator=g), torch.randn(p, 1, generator=g)
    m = OpModel("linear_topk", f"p={p} d={d} N={n} k={k} f32", how="execute=False, recorded at d = 1")
    m.launches = record(lambda: fedkernels.linear_topk(h1, W1, k=k))
    tiles = len(grouped(m.launches).get("linear_topk_tile_kernel", []))
    items = grouped(m.launches)["linear_topk_tile_kernel"][0][0][0]  # blocks of the first tile launch
    splits = max(1, items // n)
    m.kernel_bytes["linear_topk_tile_kernel"] = B(bytes_linear_topk_tile, n, p, k, splits, tiles)
    m.kernel_bytes["linear_topk_merge_kernel"] = B(bytes_linear_topk_merge, n, k, splits)
    m.kernel_bytes["linear_topk_finish_kernel"] = B(bytes_linear_topk_finish, n, k)
    gemm = "at::mm (cuBLAS, not recorded)"
    m.extra_rows.append((gemm, tiles, B(bytes_linear_topk_gemm, n, p, d, tiles, es)))
    m.flops[gemm] = 2 * n * p * d
    m.floor = B(floor_linear_topk, n, p, d, k, es)
    m.torch = B(torch_linear_topk, n, p, d, k, es)
    m.note = (
        f"{tiles} tile(s) of classes, {splits} split(s) per row; the FP32 GEMM (2 N p d flops) bounds the op, the "
        "selection reads the scores once"
    )
    return [m]
