"""Reference sketching ops: obvious loops over samples, tables and labels."""

from __future__ import annotations

import torch


def label_hash(indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor, num_buckets: int) -> torch.Tensor:
    n, r = indptr.numel() - 1, table.shape[1]
    z = torch.zeros(r, n, num_buckets, dtype=torch.uint8)
    for i in range(n):
        for pos in range(int(indptr[i]), int(indptr[i + 1])):
            label = int(indices[pos])
            for j in range(r):
                z[j, i, int(table[label, j])] = 1
    return z


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _reduce_tables(vals: list[torch.Tensor], reduce: str) -> torch.Tensor:
    """Reduce R same-shape tensors: mean/sum add them in order 0..R-1 from zero; the median sorts
    them (mean of the two middle values for even R) and is NaN wherever any value is NaN."""
    r = len(vals)
    if reduce in ("mean", "sum"):
        s = torch.zeros_like(vals[0])
        for v in vals:
            s = s + v
        return s / r if reduce == "mean" else s
    stacked = torch.stack(vals, 0)
    srt = stacked.sort(0).values
    m = r // 2
    med = srt[m] if r % 2 == 1 else (srt[m - 1] + srt[m]) * 0.5
    return torch.where(stacked.isnan().any(0), torch.full_like(med, float("nan")), med)


def bucket_merge(logp: torch.Tensor, table: torch.Tensor, reduce: str) -> torch.Tensor:
    """score[n, l] = reduce_j logp[j, n, table[l, j]], accumulated in float32 (float64 for float64)."""
    acc = _acc_dtype(logp.dtype)
    vals = [logp[j][:, table[:, j].long()].to(acc) for j in range(logp.shape[0])]
    return _reduce_tables(vals, reduce).to(logp.dtype)


def bucket_merge_topk(
    logp: torch.Tensor, table: torch.Tensor, k: int, reduce: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k of bucket_merge: descending, NaN first (largest), ties to the smaller class id."""
    scores = bucket_merge(logp, table, reduce)
    values, order = scores.sort(dim=1, descending=True, stable=True)
    return values[:, :k], order[:, :k]


def bucket_merge_backward(grad: torch.Tensor, table: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """d score / d logp for the mean: each bucket sums its classes' grads in ascending class order, / R."""
    acc = _acc_dtype(grad.dtype)
    n, p = grad.shape
    r = table.shape[1]
    out = torch.zeros(r, n, num_buckets, dtype=acc)
    for label in range(p):
        for j in range(r):
            b = int(table[label, j])
            out[j, :, b] = out[j, :, b] + grad[:, label].to(acc)
    return (out / r).to(grad.dtype)


def count_sketch(x: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """M[..., j, table[i, j]] += signs[i, j] * x[..., i], classes added in ascending order."""
    acc = _acc_dtype(x.dtype)
    p, r = table.shape
    lead = x.shape[:-1]
    rows = 1
    for d in lead:
        rows *= d
    x2 = x.reshape(rows, p).to(acc)
    out = torch.zeros(rows, r, num_buckets, dtype=acc)
    for i in range(p):
        for j in range(r):
            b = int(table[i, j])
            out[:, j, b] = out[:, j, b] + (x2[:, i] if int(signs[i, j]) > 0 else -x2[:, i])
    return out.reshape(*lead, r, num_buckets).to(x.dtype)


def count_sketch_query(sketch: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, reduce: str) -> torch.Tensor:
    """x_hat[..., i] = reduce_j signs[i, j] * sketch[..., j, table[i, j]]."""
    acc = _acc_dtype(sketch.dtype)
    m = sketch.to(acc)
    vals = []
    for j in range(table.shape[1]):
        v = m[..., j, :][..., table[:, j].long()]
        vals.append(torch.where(signs[:, j] < 0, -v, v))
    return _reduce_tables(vals, reduce).to(sketch.dtype)
