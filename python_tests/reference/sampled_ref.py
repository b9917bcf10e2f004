"""Reference sampled-softmax ops: the dense float64 formulas and plain Python loops."""

from __future__ import annotations

import torch


def linear_cross_entropy(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "mean",
):
    """(loss, lse) from the whole [N, s] logit matrix in float64 (differentiable through autograd)."""
    z = scale * (h.double() @ W.double().T)
    if bias is not None:
        z = z + bias.double()
    lse = torch.logsumexp(z, dim=1) if z.shape[1] > 0 else torch.full((z.shape[0],), float("-inf"), dtype=z.dtype)
    live = target != ignore_index
    safe = torch.where(live, target, torch.zeros_like(target))
    picked = z.gather(1, safe[:, None])[:, 0] if z.shape[1] > 0 else torch.zeros_like(lse)
    per = torch.where(live, lse - picked, torch.zeros_like(lse))
    if reduction == "none":
        return per, lse
    if reduction == "sum":
        return per.sum(), lse
    count = int(live.sum())
    return (per.sum() / count if count else per.sum() * 0.0), lse


def scatter_rows_mean(out: torch.Tensor, idx: torch.Tensor, src: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """A new float64 tensor: rows named in idx become their weighted mean, others are out's values."""
    res = out.double().clone()
    for r in sorted(set(idx.tolist())):
        num = torch.zeros(out.shape[1], dtype=torch.float64)
        den = 0.0
        for t in range(idx.numel()):
            if int(idx[t]) == r:
                num += float(weight[t]) * src[t].double()
                den += float(weight[t])
        res[r] = num / den
    return res


def scatter_rows_mean_in_order(
    out: torch.Tensor, idx: torch.Tensor, src: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """A new tensor of out's dtype with the kernels' exact rounding: per named row, in the
    accumulation dtype, acc = 0, then acc = acc + w_t * src_t over its sources in order of t, then
    acc / (the weights added in the same order). The weights are row_scaled_weights (a power-of-two
    scale per row, 1 unless the row has a weight above 1). Step k does the k-th source of every row
    at once."""
    acc_dtype = torch.float64 if out.dtype == torch.float64 else torch.float32
    res = out.clone()
    if idx.numel() == 0:
        return res
    order = torch.sort(idx, stable=True).indices  # sources by row, then by t
    rows, counts = torch.unique_consecutive(idx[order], return_counts=True)
    row_of = torch.repeat_interleave(torch.arange(rows.numel()), counts)  # row slot of order[i]
    rank = torch.arange(idx.numel()) - (torch.cumsum(counts, 0) - counts)[row_of]  # k of order[i] in its row
    by_rank = torch.sort(rank, stable=True).indices
    acc = torch.zeros(rows.numel(), src.shape[1], dtype=acc_dtype)
    den = torch.zeros(rows.numel(), dtype=acc_dtype)
    w = row_scaled_weights(idx, weight, acc_dtype)
    start = 0
    for size in torch.bincount(rank).tolist():
        sel = by_rank[start : start + size]
        which, ts = row_of[sel], order[sel]
        acc[which] = acc[which] + w[ts, None] * src[ts].to(acc_dtype)  # a product, then a sum: no fused multiply-add
        den[which] = den[which] + w[ts]
        start += size
    res[rows] = (acc / den[:, None]).to(out.dtype)
    return res


def complement(positives: list[int], num_classes: int) -> list[int]:
    """The classes in [0, num_classes) that are not positives, ascending."""
    pos = set(positives)
    return [c for c in range(num_classes) if c not in pos]


def row_scaled_weights(idx: torch.Tensor, weight: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    """The weights scatter_rows_mean sums, in acc_dtype: a row whose largest weight (in acc_dtype) is
    above 1 has them times 2^-e, e that weight's frexp exponent (so they are < 1); other rows' are
    weight.to(acc_dtype)."""
    w = weight.to(acc_dtype)
    if idx.numel() == 0:
        return w
    top = torch.zeros(int(idx.max()) + 1, dtype=acc_dtype).scatter_reduce(0, idx, w, "amax")
    scale = torch.where(top > 1, torch.ldexp(torch.ones_like(top), -torch.frexp(top)[1]), torch.ones_like(top))
    return w * scale[idx]


def cross_entropy_excluding(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    excluded: list[set[int]],
    bias: torch.Tensor | None = None,
    scale: float = 1.0,
) -> torch.Tensor:
    """Mean over rows of ``logsumexp_{j not in excluded[i]} z_ij - z_i,target`` in float64, one row at a
    time (differentiable): the softmax of row i over every column but the ones it excludes."""
    per = []
    for i in range(h.shape[0]):
        cols = [j for j in range(W.shape[0]) if j not in excluded[i]]
        z = scale * (W[cols].double() @ h[i].double())
        if bias is not None:
            z = z + bias[cols].double()
        per.append(torch.logsumexp(z, 0) - z[cols.index(int(target[i]))])
    return torch.stack(per).mean() if per else h.sum().double() * 0.0
