"""Reference sampled-softmax ops: the dense float64 formulas and plain Python loops."""

from __future__ import annotations

import torch


def linear_cross_entropy(h: torch.Tensor, W: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None = None,
                         scale: float = 1.0, ignore_index: int = -100, reduction: str = "mean"):
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


def complement(positives: list[int], num_classes: int) -> list[int]:
    """The classes in [0, num_classes) that are not positives, ascending."""
    pos = set(positives)
    return [c for c in range(num_classes) if c not in pos]
