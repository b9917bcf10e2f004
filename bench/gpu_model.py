"""GPU model of every fedkernels CUDA kernel at the bench configurations, from launches the emulator records.

No GPU is needed: each op's CUDA launcher runs on host tensors under the CUDA execution emulator
(fedkernels.testing.cuda_emulator), which records every kernel launch (name, grid, block). For
each kernel the model prints blocks, threads, warps per SM on an H100 (132 SMs), the bytes the
kernel must move (an analytic minimum: inputs read once, outputs written once, by dtype) and the
time that takes at 3.35 TB/s (HBM3 peak: a lower bound), beside the same bound for the PyTorch
composition a user would write (the benches' compositions). Launch shapes are read as recorded,
never assumed, so kernels redesigned on other branches are modelled as they launch after a merge;
a kernel without a bytes function below still gets its launch row (bytes shown as "?").

    python tools/emulate.py build                           # prints the module path
    FK_CUDA_EMU_MODULE=<that path> PYTHONPATH=src python bench/gpu_model.py [--quick]

Writes build/bench-results/gpu_model.json (gpu_model-quick.json with --quick; the committed table only
with ``--out bench/results/gpu_model.json``) and prints markdown.

How each op is recorded (most ops record without running kernel bodies, execute=False):
- linear_cross_entropy at s = 131072: the launcher runs at::mm on the CPU per 512-class chunk even
  in record mode (minutes on 2 cores), so it is recorded at two small s (s1 < s2, same N and d);
  every launch's shape there is the same as at any s (rows map to blocks: the grid depends on N
  only, checked), and each kernel's launch count is affine in s, so it is extrapolated to s exactly
  (--exact-lce records at s itself: the same 257 forward and 256 backward launches, in about a minute).
- scatter_rows_mean reads its segment weight sums back on the host (the zero-weight check) between
  its two kernels, so it runs with execute=True (the emulator executes both kernels).
- prox_tv1d reads a finiteness flag back on the host: it runs with execute=True (one row of
  d = 1e7 is one emulated thread running the sequential solver: seconds).
- spreadout_loss is recorded as its parts: knn_classes, then spreadout_pair_loss (forward) and
  spreadout_pair_loss_backward on a valid neighbour table (in record mode knn's indices are
  uninitialised, and the pair loss validates them).
- masked_weighted_average: the bench's clients send the top half of tensors by delta norm, and
  with its i.i.d. updates (||delta|| ~ 0.01 sqrt(numel)) those are the largest tensors: the model
  sends those directly (4 clients, weights 1..4).

Caveats: warps/SM = all warps of one launch / 132 (what the launch offers the machine); at most 64
warps and 32 blocks are resident per SM, fewer when registers or shared memory limit occupancy
(the emulator cannot see either), so "waves" is an upper-bound-occupancy estimate. The bytes are
global-memory traffic at kernel boundaries (L2 reuse inside a kernel counts once); launchers also
run ATen ops on the device (sorts, segment builds, fills, reductions) that are not modelled, except
linear_cross_entropy's and knn_classes' cuBLAS GEMMs, which are listed as their own rows. The
GEMMs are compute-bound: their bandwidth bound is far below their real time (flops are given).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import common
import torch
from select_shapes import bert_base_shapes, resnet50_shapes

import fedkernels
from fedkernels import HashFamily

# ---- the machine: NVIDIA H100 SXM
SMS = 132
HBM_BYTES_PER_S = 3.35e12
FP32_FLOPS = 67e12  # non-tensor FP32 peak (for the compute-bound notes only)
WARP = 32
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
FEW_WARPS_PER_SM = 4  # flag launches that offer fewer warps than this per SM

# ---- the bench configurations
FEDMLH = [(3993, 4, 250), (30938, 4, 1000), (131073, 4, 4000), (312330, 8, 5000)]  # bench/sketch.py (p, R, B)
FEDMLH_N, FEDMLH_K, LABELS_PER_SAMPLE, COUNT_SKETCH_ROWS = 1024, 5, 5, 64
FEDMLH_K_GENERAL = 100  # a top-100 (recall@100-style evaluation): beyond the 32-entry fast path
FEDSS = dict(n=4096, s=131072, d=256)  # bench/sampled.py's largest LCE
SCATTER = [(4096, 16384), (131072, 65536)]  # bench/sampled.py's (n rows, T sources), d = 256 (first and last)
NEGATIVES, SAMPLER_CLIENTS = 16384, 64  # sampler: m negatives of s classes; batched over 64 clients
PARTIAL_CLIENTS, PARTIAL_FRACTION = 4, 0.5  # bench/select_norms.py's average
PROX_D = 10**7
SPREAD = [(100000, 64), (100000, 512)]  # bench/spread.py's C = 100000, k = 10
SPREAD_K, SPREAD_MARGIN, PAIRS_PER_CLASS = 10, 1.0, 10
KNN_SLACK = 8  # spread.h candidate_capacity(k) = k + 8
KNN_ROW_TILE, KNN_COL_TILE = 10240, 8192  # spread_cuda.cu kRowTile, kColTile (FEDKERNELS_KNN_CUDA_TILES unset)
TOPK = [(131073, 128, 256), (312330, 512, 4096), (670091, 512, 4096)]  # bench/topk.py's (p, d, N), k = 5
TOPK_K = 5


def quick_configs() -> dict:
    return dict(
        fedmlh=FEDMLH[:2],
        fedmlh_n=256,
        fedss=dict(n=256, s=16384, d=64),
        scatter=[(1024, 2048)],
        scatter_d=64,
        negatives=1024,
        sampler_clients=8,
        models=["resnet50"],
        dtypes=[torch.float32],
        prox=[(10**5, 0), (10**5, 1000)],
        spread=[(2000, 64)],
        topk=[(16384, 64, 256)],
    )


def full_configs() -> dict:
    return dict(
        fedmlh=FEDMLH,
        fedmlh_n=FEDMLH_N,
        fedss=FEDSS,
        scatter=SCATTER,
        scatter_d=256,
        negatives=NEGATIVES,
        sampler_clients=SAMPLER_CLIENTS,
        models=["resnet50", "bert-base"],
        dtypes=[torch.float32, torch.bfloat16],
        prox=[(PROX_D, 0), (PROX_D, 1000)],
        spread=SPREAD,
        topk=TOPK,
    )


# ---- launch arithmetic


def launch_stats(grid: tuple[int, int, int], block: tuple[int, int, int]) -> dict:
    """Blocks, threads, warps and per-SM occupancy of one launch on the H100."""
    blocks = grid[0] * grid[1] * grid[2]
    threads = block[0] * block[1] * block[2]
    warps_per_block = -(-threads // WARP)
    warps = blocks * warps_per_block
    # resident blocks per SM: 64 warps and 32 blocks at most (registers / shared memory may cut this further)
    blocks_per_sm = max(1, min(MAX_BLOCKS_PER_SM, MAX_WARPS_PER_SM // max(warps_per_block, 1)))
    return {
        "blocks": blocks,
        "threads_per_block": threads,
        "warps": warps,
        "warps_per_sm": warps / SMS,
        "resident_warps_per_sm": min(-(-blocks // SMS), blocks_per_sm) * warps_per_block,
        "waves": -(-blocks // (SMS * blocks_per_sm)),
    }


def bound_us(nbytes: float | None) -> float | None:
    """The time to move nbytes at 3.35 TB/s, in microseconds."""
    return None if nbytes is None else nbytes / HBM_BYTES_PER_S * 1e6


def why(fn: Callable) -> str:
    """A function's one-sentence why: its docstring's first paragraph, joined into one line."""
    return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())


def B(fn: Callable, *args) -> tuple[int, str]:
    """A bytes function's value and its one-line why."""
    return int(fn(*args)), why(fn)


# ---- bytes the kernels must move (analytic minimum: inputs read once, outputs written once)
# es = element size of the data dtype; int32 table entries 4, int8 signs 1, int64 ids 8.


def bytes_hash_buckets(n, r):
    """ids read (8 n) and 4 int64 parameters per table (32 R); int32 buckets and int8 signs written (5 n R)."""
    return 8 * n + 32 * r + 5 * n * r


def bytes_label_hash(n, nnz, r, b, p):
    """[R, N, B] uint8 written once; indptr and labels read (8 (N+1) + 8 nnz); R int32 table entries per label (at most
    the table)."""
    return r * n * b + 8 * (n + 1) + 8 * nnz + 4 * r * min(nnz, p)


def bytes_bucket_merge(n, p, r, b, es):
    """logp [R, N, B] read once, table [p, R] int32 read once, scores [N, p] written once."""
    return r * n * b * es + 4 * p * r + n * p * es


def bytes_bucket_merge_topk(n, p, r, b, k, es):
    """logp [R, N, B] and table read once; k values and k int64 ids written per row (no [N, p])."""
    return r * n * b * es + 4 * p * r + n * k * (es + 8)


def bytes_topk_merge(n, k, splits, es):
    """Split rows: each split's k sorted 8-byte composites read once; k values and ids written per row."""
    return n * splits * k * 8 + n * k * (es + 8)


def bytes_bucket_merge_backward(n, p, r, b, es):
    """grad [N, p] read once, table read once, grad logp [R, N, B] written once."""
    return n * p * es + 4 * p * r + r * n * b * es


def bytes_count_sketch(rows, p, r, b, es):
    """x [rows, p] read once, table (int32) and signs (int8) read once, sketch [rows, R, B] written once."""
    return rows * p * es + 5 * p * r + rows * r * b * es


def bytes_count_sketch_query(rows, p, r, b, es):
    """sketch [rows, R, B] read once, table and signs read once, estimates [rows, p] written once."""
    return rows * r * b * es + 5 * p * r + rows * p * es


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


def bytes_norm_partials(model_bytes, chunks):
    """new and old read once each (2x the model's bytes); one float64 partial per chunk written (the packed plan is
    small)."""
    return 2 * model_bytes + 8 * chunks


def bytes_norm_finish(m, chunks):
    """the chunk partials read once (8 per chunk); one float32 norm per tensor written (4 M)."""
    return 8 * chunks + 4 * m


def bytes_topk_rank(m, k):
    """the M float32 norms read once (the O(M^2) re-reads hit cache); k int64 indices written."""
    return 4 * m + 8 * k


def bytes_masked(sent_bytes, written_bytes):
    """every sent tensor read once; every tensor some client sent written once."""
    return sent_bytes + written_bytes


def bytes_tv1d(elems, items, es):
    """z read once and u written once (2 es per element); one flag byte per item (the solver's chain scratch is not
    counted)."""
    return 2 * es * elems + items


def bytes_tv1d_backward(elems, items, es):
    """grad and u read once, grad z written once (3 es per element); one float64 lam gradient per item."""
    return 3 * es * elems + 8 * items


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


# ---- op floors (the op's own inputs read once and outputs written once, whatever its kernels)


def floor_lce_forward(n, s, d, es):
    """h, W, bias read once (es (N d + s d + s)), target (8 N); lse written (es N), loss a scalar."""
    return es * (n * d + s * d + s + n) + 8 * n


def floor_lce_backward(n, s, d, es):
    """h, W, bias, lse, grad loss, grad lse, target read; grad h, grad W, grad bias written."""
    return es * (2 * n * d + 2 * s * d + 2 * s + 3 * n) + 8 * n


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


def floor_knn(c, d, k, es, acc):
    """W read once; k distances and int64 ids written per row."""
    return c * d * es + c * k * (acc + 8)


def floor_spread_forward(c, d, es):
    """W read once (neighbour selection included); a scalar written."""
    return c * d * es + 8


def floor_spread_backward(c, d, k, es):
    """W and the neighbour table (8 C k) read once; grad W written once."""
    return 2 * c * d * es + 8 * c * k


# ---- the PyTorch compositions (the eager ops the benches time), lower bounds of their traffic


def torch_label_hash(n, nnz, r, b):
    """bench compose_label_hash: zeros [R,N,B], repeat_interleave rows, table[indices] gather, .long(), index_put of R
    nnz ones."""
    zeros = r * n * b
    rows = 8 * (n + 1) + 8 * nnz
    gather = 8 * nnz + 4 * r * nnz + 4 * r * nnz
    to_long = 4 * r * nnz + 8 * r * nnz
    index_put = 8 * nnz + 8 * r * nnz + 8 * r + r * nnz
    return zeros + rows + gather + to_long + index_put


def torch_bucket_merge(n, p, r, b, es, chunks):
    """bench compose_merge: per table gather logp[j][:, idx_j] ([N, p] written), stack (R N p read+written), mean over
    R, cat of row chunks."""
    idx = 4 * p * r + 8 * p * r + chunks * r * 8 * p
    gather = r * n * b * es + r * n * p * es
    stack = 2 * r * n * p * es
    mean = r * n * p * es + n * p * es
    cat = 2 * n * p * es if chunks > 1 else 0
    return idx + gather + stack + mean + cat


def torch_bucket_merge_topk(n, p, r, b, k, es, chunks):
    """bench compose_merge_topk: the same [R, N, p] gather, stack and mean, then topk reads [N, p] and writes k values
    and ids."""
    idx = 4 * p * r + 8 * p * r + chunks * r * 8 * p
    scores = r * n * b * es + r * n * p * es + 2 * r * n * p * es + r * n * p * es + n * p * es
    topk = n * p * es + n * k * (es + 8)
    cat = 2 * n * k * (es + 8) if chunks > 1 else 0
    return idx + scores + topk + cat


def torch_bucket_merge_backward(n, p, r, b, es):
    """the explicit backward of compose_merge: zeros [R,N,B], table .long(), g = grad / R, per table index_add_(1,
    idx_j, g) (g read, slice read+written)."""
    return r * n * b * es + 2 * n * p * es + 12 * p * r + r * (n * p * es + 8 * p + 2 * n * b * es)


def torch_count_sketch(rows, p, r, b, es):
    """bench compose_count_sketch: zeros [rows,R,B]; per table signs .to(dtype), x * signs, table .long(), index_add_
    (x*s read, slice read+written)."""
    per_table = (
        (p + p * es)
        + (rows * p * es + p * es + rows * p * es)
        + (4 * p + 8 * p)
        + (rows * p * es + 8 * p + 2 * rows * b * es)
    )
    return rows * r * b * es + r * per_table


def torch_count_sketch_query(rows, p, r, b, es):
    """bench compose_query_median: per table gather + sign multiply ([rows, p] each), stack, sort over R (values +
    int64 indices), middle pair mean."""
    per_table = (4 * p + 8 * p) + (8 * p + rows * b * es + rows * p * es) + (p + p * es) + (2 * rows * p * es + p * es)
    stack = 2 * r * rows * p * es
    sort = r * rows * p * es + r * rows * p * (es + 8)
    middle = (3 * rows * p * es + 2 * rows * p * es) if r % 2 == 0 else 0
    return r * per_table + stack + sort + middle


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


def torch_delta_norms(model_bytes, m):
    """bench _foreach_norm(_foreach_sub(new, old)): the differences written and read again (4x the model), M norms."""
    return 4 * model_bytes + 8 * m


def torch_select_topk(model_bytes, m):
    """bench foreach norms + sort(descending, stable): 4x the model, then M norms sorted (values and int64 indices)."""
    return torch_delta_norms(model_bytes, m) + 4 * m + 12 * m


def torch_masked_average(elems_by_contributors):
    """bench loop_average: per tensor with c senders, c products, the running sum (0 + t1, then c - 1 adds), the
    division, copy_: (5 c + 3) n floats."""
    return sum(4 * (5 * c + 3) * n for c, n in elems_by_contributors)


def torch_prox_tv1d(elems, es, iters=100):
    """bench pg_baseline (FISTA, 100 iterations): 30 element accesses per iteration (12 elementwise ops), 9 more around
    the loop."""
    return (30 * iters + 9) * elems * es


def torch_prox_tv1d_backward(elems, es, iters=100):
    """autograd through the same 100 iterations: each op's backward moves at least its forward's elements (lower bound
    = forward)."""
    return torch_prox_tv1d(elems, es, iters)


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


# ---- recording


@dataclass
class OpModel:
    op: str
    config: str
    launches: list = field(default_factory=list)  # (kernel, grid, block) as recorded (or extrapolated)
    kernel_bytes: dict = field(default_factory=dict)  # kernel -> (bytes over all its launches, why)
    extra_rows: list = field(default_factory=list)  # non-recorded device work we model (cuBLAS GEMMs)
    floor: tuple | None = None  # (bytes, why): the op's own inputs and outputs
    torch: tuple | None = None  # (bytes, why) of the PyTorch composition, None: none
    flops: dict = field(default_factory=dict)  # kernel -> flops (compute-bound kernels)
    how: str = "execute=False"
    note: str = ""


_EMU = None


def emulator():
    global _EMU
    if _EMU is None:
        from fedkernels.testing import cuda_emulator as emu

        emu.load()
        _EMU = emu
    return _EMU


def record(fn: Callable[[], object], execute: bool = False) -> list:
    """The launches of ``fn()`` with every fedkernels op routed to its emulated CUDA kernel."""
    emu = emulator()
    with emu.routed_to_cuda(), emu.recording(execute=execute) as launches:
        fn()
    return [(name, tuple(grid), tuple(block)) for name, grid, block in launches]


def grouped(launches: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for name, grid, block in launches:
        out.setdefault(name, []).append((grid, block))
    return out


# ---- FedMLH


def fedmlh_models(p: int, r: int, b: int, n: int) -> list[OpModel]:
    cfg = f"p={p} R={r} B={b} N={n}"
    hf = HashFamily(r, b, seed=0)
    table, signs = hf.table(p), hf.signs(p)  # CPU kernels, outside the routing
    ids = torch.arange(p, dtype=torch.int64)
    out = []
    m = OpModel("hash_buckets", f"p={p} R={r}")
    m.launches = record(lambda: torch.ops.fedkernels.hash_buckets(ids, hf.params, b))
    m.kernel_bytes["hash_buckets_kernel"] = B(bytes_hash_buckets, p, r)
    m.floor = m.kernel_bytes["hash_buckets_kernel"]
    m.note = "no eager composition: the hash needs exact 64x64->128-bit products mod 2^61-1"
    out.append(m)

    g = torch.Generator().manual_seed(0)
    indptr = torch.arange(0, (n + 1) * LABELS_PER_SAMPLE, LABELS_PER_SAMPLE, dtype=torch.int64)
    indices = torch.randint(0, p, (n * LABELS_PER_SAMPLE,), generator=g)
    nnz = indices.numel()
    m = OpModel("label_hash", cfg + f" nnz={nnz}")
    m.launches = record(lambda: fedkernels.label_hash(indptr, indices, table, b))
    m.kernel_bytes["label_hash_kernel"] = B(bytes_label_hash, n, nnz, r, b, p)
    m.floor = m.kernel_bytes["label_hash_kernel"]
    m.torch = B(torch_label_hash, n, nnz, r, b)
    out.append(m)

    es = 4  # the bench's logp is float32
    logp = torch.empty(r, n, b)  # record mode: values never read, pages never touched
    chunks = 1 if r * n * p * 4 <= 2 << 30 else -(-n // 128)  # bench/sketch.py _row_chunks
    m = OpModel("bucket_merge", cfg)
    m.launches = record(lambda: fedkernels.bucket_merge(logp, table))
    m.kernel_bytes["bucket_merge_kernel"] = B(bytes_bucket_merge, n, p, r, b, es)
    m.floor = m.kernel_bytes["bucket_merge_kernel"]
    m.torch = B(torch_bucket_merge, n, p, r, b, es, chunks)
    out.append(m)

    for k in (FEDMLH_K, FEDMLH_K_GENERAL):  # k <= 32: the register fast path; larger k: the general path
        m = OpModel("bucket_merge_topk", cfg + f" k={k}")
        m.launches = record(lambda k=k: fedkernels.bucket_merge_topk(logp, table, k))
        scan = "topk_scan_kernel" if k <= 32 else "topk_general_kernel"
        # One block per (row, class range): the scan reads logp and the table; split rows add a merge pass.
        m.kernel_bytes[scan] = B(bytes_bucket_merge_topk, n, p, r, b, k, es)
        splits = max((grid[0] * grid[1] * grid[2] for name, grid, _ in m.launches if name == scan), default=n) // max(
            n, 1
        )
        if splits > 1:
            m.kernel_bytes["topk_merge_kernel"] = B(bytes_topk_merge, n, k, splits, es)
        m.floor = m.kernel_bytes[scan]
        m.torch = B(torch_bucket_merge_topk, n, p, r, b, k, es, chunks)
        out.append(m)

    grad = torch.empty(n, p)
    m = OpModel("bucket_merge_backward", cfg)
    m.launches = record(lambda grad=grad: torch.ops.fedkernels.bucket_merge_backward(grad, table, b))
    m.kernel_bytes["bucket_gather_kernel"] = B(bytes_bucket_merge_backward, n, p, r, b, es)
    m.floor = m.kernel_bytes["bucket_gather_kernel"]
    m.torch = B(torch_bucket_merge_backward, n, p, r, b, es)
    out.append(m)
    del grad

    x = torch.empty(COUNT_SKETCH_ROWS, p)
    m = OpModel("count_sketch", f"p={p} R={r} B={b} rows={COUNT_SKETCH_ROWS}")
    m.launches = record(lambda: fedkernels.count_sketch(x, table, signs, b))
    m.kernel_bytes["bucket_gather_kernel"] = B(bytes_count_sketch, COUNT_SKETCH_ROWS, p, r, b, es)
    m.floor = m.kernel_bytes["bucket_gather_kernel"]
    m.torch = B(torch_count_sketch, COUNT_SKETCH_ROWS, p, r, b, es)
    out.append(m)

    sk = torch.empty(COUNT_SKETCH_ROWS, r, b)
    m = OpModel("count_sketch_query", f"p={p} R={r} B={b} rows={COUNT_SKETCH_ROWS} median")
    m.launches = record(lambda: fedkernels.count_sketch_query(sk, table, signs))
    m.kernel_bytes["count_sketch_query_kernel"] = B(bytes_count_sketch_query, COUNT_SKETCH_ROWS, p, r, b, es)
    m.floor = m.kernel_bytes["count_sketch_query_kernel"]
    m.torch = B(torch_count_sketch_query, COUNT_SKETCH_ROWS, p, r, b, es)
    out.append(m)
    return out


# ---- FedSS


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


# ---- partial weight exchange

MODELS = {"resnet50": resnet50_shapes, "bert-base": bert_base_shapes}


def partial_models(model: str, dtypes: list[torch.dtype]) -> list[OpModel]:
    shapes = MODELS[model]()
    out = []
    for dtype in dtypes:
        es = torch.empty((), dtype=dtype).element_size()
        new = [torch.empty(s, dtype=dtype) for s in shapes]
        old = [torch.empty(s, dtype=dtype) for s in shapes]
        model_bytes = sum(x.numel() for x in new) * es
        tname = str(dtype).replace("torch.", "")
        mcount = len(shapes)
        m = OpModel("delta_norms", f"{model} M={mcount} {tname}")
        m.launches = record(lambda new=new, old=old: fedkernels.delta_norms(new, old))
        chunks = sum(launch_stats(gr, bl)["blocks"] for name, gr, bl in m.launches if name == "norm_partials_kernel")
        m.kernel_bytes["norm_partials_kernel"] = B(bytes_norm_partials, model_bytes, chunks)
        m.kernel_bytes["norm_finish_kernel"] = B(bytes_norm_finish, mcount, chunks)
        m.floor = (2 * model_bytes + 4 * mcount, "new and old read once; M float32 norms written.")
        m.torch = B(torch_delta_norms, model_bytes, mcount)
        out.append(m)

        k = fedkernels.num_selected(mcount, 0.1)
        m = OpModel("select_topk_tensors", f"{model} M={mcount} {tname} fraction=0.1")
        m.launches = record(lambda new=new, old=old: fedkernels.select_topk_tensors(new, old, 0.1))
        m.kernel_bytes["norm_partials_kernel"] = B(bytes_norm_partials, model_bytes, chunks)
        m.kernel_bytes["norm_finish_kernel"] = B(bytes_norm_finish, mcount, chunks)
        m.kernel_bytes["topk_rank_kernel"] = B(bytes_topk_rank, mcount, k)
        m.floor = (2 * model_bytes + 8 * k, "new and old read once; k int64 indices written.")
        m.torch = B(torch_select_topk, model_bytes, mcount)
        out.append(m)
        del new, old

    # masked_weighted_average: float32, PARTIAL_CLIENTS clients each sending the largest half of the tensors
    k = fedkernels.num_selected(len(shapes), PARTIAL_FRACTION)
    order = sorted(range(len(shapes)), key=lambda i: (-math.prod(shapes[i]), i))[:k]
    idx = torch.tensor(order, dtype=torch.int64)
    dst = [torch.empty(s) for s in shapes]
    sent = [(idx, [torch.empty(shapes[i]) for i in order], float(c + 1)) for c in range(PARTIAL_CLIENTS)]
    m = OpModel(
        "masked_weighted_average", f"{model} M={len(shapes)} f32 clients={PARTIAL_CLIENTS} fraction={PARTIAL_FRACTION}"
    )
    m.launches = record(lambda: fedkernels.masked_weighted_average(dst, sent))
    sent_bytes = sum(x.numel() * 4 for _, xs, _ in sent for x in xs)
    written = sum(math.prod(shapes[i]) * 4 for i in order)
    m.kernel_bytes["masked_kernel"] = B(bytes_masked, sent_bytes, written)
    m.floor = m.kernel_bytes["masked_kernel"]
    m.torch = B(torch_masked_average, [(PARTIAL_CLIENTS, math.prod(shapes[i])) for i in order])
    m.note = "senders: the largest half of the tensors (the bench's top-half by delta norm, see the docstring)"
    out.append(m)
    return out


# ---- prox


def prox_models(d: int, block_size: int) -> list[OpModel]:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(d, generator=g)
    items = 1 if block_size == 0 else -(-d // block_size)
    cfg = f"d={d} f32 " + ("one row" if block_size == 0 else f"block_size={block_size}")
    out = []
    m = OpModel("prox_tv1d", cfg, how="execute=True (host reads the finiteness flags)")
    t0 = time.perf_counter()
    holder = {}
    m.launches = record(lambda: holder.setdefault("u", fedkernels.prox_tv1d(z, 1.0, True, block_size)), execute=True)
    m.how += f", {time.perf_counter() - t0:.1f} s emulated"
    m.kernel_bytes["tv1d_kernel"] = B(bytes_tv1d, d, items, 4)
    m.floor = (8 * d, "z read once, u written once.")
    m.torch = B(torch_prox_tv1d, d, 4)
    out.append(m)
    u = holder["u"]
    lam = torch.tensor(1.0)
    gu = torch.randn(d, generator=g)
    m = OpModel("prox_tv1d_backward", cfg, how="execute=True")
    m.launches = record(lambda: torch.ops.fedkernels.prox_tv1d_backward(gu, u, lam, True, block_size), execute=True)
    m.kernel_bytes["tv1d_backward_kernel"] = B(bytes_tv1d_backward, d, items, 4)
    m.floor = (12 * d, "grad and u read once, grad z written once.")
    m.torch = B(torch_prox_tv1d_backward, d, 4)
    out.append(m)
    return out


# ---- spreadout


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


# ---- fused linear top-k


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


# ---- the model


def build_models(quick: bool, log: Callable[[str], None] = print, exact_lce: bool = False) -> list[OpModel]:
    cfg = quick_configs() if quick else full_configs()
    models: list[OpModel] = []

    def step(what: str, fn: Callable[[], list[OpModel]]) -> None:
        t0 = time.perf_counter()
        got = fn()
        models.extend(got)
        log(f"  recorded {what}: {sum(len(m.launches) for m in got)} launches, {time.perf_counter() - t0:.1f} s")

    for p, r, b in cfg["fedmlh"]:
        step(f"FedMLH p={p}", lambda p=p, r=r, b=b: fedmlh_models(p, r, b, cfg["fedmlh_n"]))
    ss = cfg["fedss"]
    step("sampler", lambda: sampler_models(ss["s"], ss["n"], cfg["negatives"], cfg["sampler_clients"]))
    step("linear_cross_entropy", lambda: lce_models(ss["n"], ss["s"], ss["d"], exact_lce))
    for n, t in cfg["scatter"]:
        step(f"scatter_rows_mean n={n} T={t}", lambda n=n, t=t: scatter_models(n, t, cfg["scatter_d"]))
    for model in cfg["models"]:
        step(f"partial exchange {model}", lambda model=model: partial_models(model, cfg["dtypes"]))
    for d, bs in cfg["prox"]:
        step(f"prox d={d} block={bs}", lambda d=d, bs=bs: prox_models(d, bs))
    for i, (c, d) in enumerate(cfg["spread"]):
        step(f"spread C={c} d={d}", lambda c=c, d=d, i=i: spread_models(c, d, with_pair_weights=i == 0))
    for p, d, n in cfg["topk"]:
        step(f"linear_topk p={p} d={d} N={n}", lambda p=p, d=d, n=n: topk_models(p, d, n))
    return models


def rows_of(models: list[OpModel]) -> tuple[list[dict], list[dict]]:
    """Per-kernel rows and per-op summary rows."""
    krows, orows = [], []
    for m in models:
        groups = grouped(m.launches)
        fk_total, known = 0, True
        min_wps, main = None, (-1, None)  # main: (bytes, warps/SM) of the kernel that moves the most bytes
        for name, shapes in groups.items():
            stats = [launch_stats(gr, bl) for gr, bl in shapes]
            big = max(range(len(stats)), key=lambda i: stats[i]["warps"])
            s = stats[big]
            nbytes, reason = m.kernel_bytes.get(name, (None, "no bytes function for this kernel"))
            if nbytes is None:
                known = False
            else:
                fk_total += nbytes
            min_wps = s["warps_per_sm"] if min_wps is None else min(min_wps, s["warps_per_sm"])
            if (nbytes or 0) > main[0]:
                main = (nbytes or 0, s["warps_per_sm"])
            distinct = sorted({(gr, bl) for gr, bl in shapes})
            row = {
                "op": m.op,
                "config": m.config,
                "kernel": name,
                "launches": len(shapes),
                "grid": list(shapes[big][0]),
                "block": list(shapes[big][1]),
                **s,
                "shapes": [[list(gr), list(bl)] for gr, bl in distinct],
                "few_warps": s["warps_per_sm"] < FEW_WARPS_PER_SM,
                "bytes": nbytes,
                "bound_us": bound_us(nbytes),
                "bytes_why": reason,
            }
            if name in m.flops:
                row["flops"] = m.flops[name]
                row["fp32_bound_us"] = m.flops[name] / FP32_FLOPS * 1e6
            krows.append(row)
        for name, count, (nbytes, reason) in m.extra_rows:
            fk_total += nbytes
            row = {
                "op": m.op,
                "config": m.config,
                "kernel": name,
                "launches": count,
                "bytes": nbytes,
                "bound_us": bound_us(nbytes),
                "bytes_why": reason,
                "few_warps": False,
            }
            if name in m.flops:
                row["flops"] = m.flops[name]
                row["fp32_bound_us"] = m.flops[name] / FP32_FLOPS * 1e6
            krows.append(row)
        torch_bytes = m.torch[0] if m.torch else None
        orows.append(
            {
                "op": m.op,
                "config": m.config,
                "kernels": len(groups),
                "launches": len(m.launches),
                "fk_bytes": fk_total if known else None,
                "fk_bound_us": bound_us(fk_total) if known else None,
                "floor_bytes": m.floor[0] if m.floor else None,
                "floor_bound_us": bound_us(m.floor[0]) if m.floor else None,
                "floor_why": m.floor[1] if m.floor else None,
                "torch_bytes": torch_bytes,
                "torch_bound_us": bound_us(torch_bytes),
                "torch_why": m.torch[1] if m.torch else m.note,
                "torch_over_fk": (torch_bytes / fk_total) if (torch_bytes and known and fk_total) else None,
                "min_warps_per_sm": min_wps,
                "main_kernel_warps_per_sm": main[1],
                "few_warps": min_wps is not None and min_wps < FEW_WARPS_PER_SM,
                "how": m.how,
                "note": m.note,
            }
        )
    return krows, orows


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _fmt_us(t: float | None) -> str:
    if t is None:
        return "—"
    return f"{t:.3g}" if t < 1000 else f"{t:,.0f}"


def markdown(krows: list[dict], orows: list[dict]) -> str:
    """One table: each op's kernels, then the op's total beside the PyTorch composition's bound."""
    head = (
        "| op | config | kernel | launches | blocks | threads | warps/SM | waves | bytes | bound µs "
        "| torch bytes | torch bound µs | torch/fk |\n|" + "---|" * 13 + "\n"
    )
    lines = []
    for o in orows:
        for k in (r for r in krows if r["op"] == o["op"] and r["config"] == o["config"]):
            if "blocks" in k:
                wps = f"{k['warps_per_sm']:.3g}" + (" ⚠" if k["few_warps"] else "")
                shape = [str(k["blocks"]), str(k["threads_per_block"]), wps, str(k["waves"])]
                if len(k["shapes"]) > 1:
                    shape[0] += f" (max of {len(k['shapes'])} shapes)"
            else:
                shape = ["—", "—", "—", "—"]
            lines.append(
                f"| {o['op']} | {o['config']} | {k['kernel']} | {k['launches']} | "
                + " | ".join(shape)
                + f" | {_fmt_bytes(k['bytes'])} | {_fmt_us(k['bound_us'])} |  |  |  |"
            )
        ratio = f"{o['torch_over_fk']:.3g}x" if o["torch_over_fk"] else "—"
        lines.append(
            f"| {o['op']} | {o['config']} | **total** | {o['launches']} |  |  |  |  "
            f"| **{_fmt_bytes(o['fk_bytes'])}** | **{_fmt_us(o['fk_bound_us'])}** "
            f"| {_fmt_bytes(o['torch_bytes']) if o['torch_bytes'] else 'n/a'} "
            f"| {_fmt_us(o['torch_bound_us'])} | {ratio} |"
        )
    return head + "\n".join(lines)


def summary_markdown(orows: list[dict]) -> str:
    """One row per op and configuration: the fewest warps per SM of its launches and of its main kernel
    (the one moving the most bytes), and both bounds."""
    head = (
        "| op | config | kernels | min warps/SM | main kernel warps/SM | fedkernels bytes | bound µs "
        "| torch bytes | torch bound µs | torch/fk |\n|" + "---|" * 10 + "\n"
    )
    lines = []

    def w(v: float | None) -> str:
        return "—" if v is None else f"{v:.3g}" + (" ⚠" if v < FEW_WARPS_PER_SM else "")

    for o in orows:
        wps = f"{w(o['min_warps_per_sm'])} | {w(o['main_kernel_warps_per_sm'])}"
        ratio = f"{o['torch_over_fk']:.3g}x" if o["torch_over_fk"] else "—"
        lines.append(
            f"| {o['op']} | {o['config']} | {o['kernels']} | {wps} | {_fmt_bytes(o['fk_bytes'])} "
            f"| {_fmt_us(o['fk_bound_us'])} | {_fmt_bytes(o['torch_bytes']) if o['torch_bytes'] else 'n/a'} "
            f"| {_fmt_us(o['torch_bound_us'])} | {ratio} |"
        )
    return head + "\n".join(lines)


def flagged(krows: list[dict]) -> list[str]:
    return [
        f"{k['op']} [{k['config']}] {k['kernel']}: {k['warps_per_sm']:.3g} warps/SM "
        f"({k['blocks']} blocks x {k['threads_per_block']} threads)"
        for k in krows
        if k.get("few_warps")
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small configurations (the test's run, seconds)")
    ap.add_argument(
        "--exact-lce",
        action="store_true",
        help="record linear_cross_entropy at the real s (minutes of host GEMMs) instead of extrapolating",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default build/bench-results/gpu_model.json, --quick: gpu_model-quick.json there)",
    )
    args = ap.parse_args(argv)
    if not os.environ.get("FK_CUDA_EMU_MODULE"):
        ap.error("set FK_CUDA_EMU_MODULE to the module `python tools/emulate.py build` prints")
    t0 = time.perf_counter()
    print(
        f"H100 model: {SMS} SMs, {HBM_BYTES_PER_S / 1e12:.2f} TB/s; recording launches "
        f"({'quick' if args.quick else 'bench'} configurations)",
        flush=True,
    )
    models = build_models(args.quick, log=lambda s: print(s, flush=True), exact_lce=args.exact_lce)
    krows, orows = rows_of(models)
    print()
    print(markdown(krows, orows))
    print("\nPer op (fedkernels: its kernels' bytes, plus the LCE's cuBLAS GEMMs; torch: the composition):\n")
    print(summary_markdown(orows))
    flags = flagged(krows)
    print(f"\nLaunches offering fewer than {FEW_WARPS_PER_SM} warps per SM (⚠):")
    for f in flags:
        print(f"  - {f}")
    unknown = sorted({k["kernel"] for k in krows if k.get("blocks") is not None and k["bytes"] is None})
    if unknown:
        print(
            "\nKernels without a bytes function (add one beside the others; their ops' totals show ?): "
            + ", ".join(unknown)
        )
    compute = [k for k in krows if "flops" in k]
    if compute:
        print("\nCompute-bound rows (FP32 non-tensor peak 67 TFLOP/s; TF32 tensor cores are faster for the GEMMs):")
        for k in compute:
            print(
                f"  - {k['op']} [{k['config']}] {k['kernel']}: {k['flops']:.3g} flop -> >= {k['fp32_bound_us']:,.0f} µs"
            )
    notes = [(o["op"], o["config"], o["how"], o["note"]) for o in orows]
    print("\nHow each op was recorded / what is not modelled:")
    for op, cfg, how, note in notes:
        print(f"  - {op} [{cfg}]: {how}" + (f"; {note}" if note else ""))
    name = "gpu_model-quick" if args.quick else "gpu_model"
    extra = {
        "machine_model": {
            "gpu": "H100 SXM",
            "sms": SMS,
            "hbm_bytes_per_s": HBM_BYTES_PER_S,
            "max_warps_per_sm": MAX_WARPS_PER_SM,
            "max_blocks_per_sm": MAX_BLOCKS_PER_SM,
            "fp32_flops": FP32_FLOPS,
            "few_warps_per_sm": FEW_WARPS_PER_SM,
        },
        "ops": orows,
        "flagged": flags,
        "elapsed_s": time.perf_counter() - t0,
    }
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        import json

        path.write_text(json.dumps({"benchmark": name, "rows": krows, **extra}, indent=2))
    else:
        path = common.write_results(name, krows, extra, path=common.results_path(name, out=None, quick=args.quick))
    print(f"\nwrote {path} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
