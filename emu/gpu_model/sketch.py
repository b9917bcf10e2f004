"""FedMLH (csrc/sketch): hashing, label_hash, bucket_merge(_topk/_backward), count_sketch(_query)."""

from __future__ import annotations

import torch

import fedkernels
from fedkernels import HashFamily

from .common import B, OpModel, record
from .configs import COUNT_SKETCH_ROWS, FEDMLH_K, FEDMLH_K_GENERAL, LABELS_PER_SAMPLE


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
    chunks = 1 if r * n * p * 4 <= 2 << 30 else -(-n // 128)  # bench/ops/sketch.py _row_chunks
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
