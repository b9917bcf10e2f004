"""Reference partial-weight-exchange ops: obvious per-tensor loops in float64."""

from __future__ import annotations

import math
from fractions import Fraction

import torch


def delta_norms(new: list[torch.Tensor], old: list[torch.Tensor], normalize: bool = False) -> torch.Tensor:
    """float64 [M]: ``(a - b).norm()`` per tensor (divided by sqrt(numel) when normalize; 0 if empty)."""
    out = []
    for a, b in zip(new, old, strict=True):
        n = (a.double() - b.double()).norm().item()
        if normalize:
            n = n / math.sqrt(a.numel()) if a.numel() > 0 else 0.0
        out.append(n)
    return torch.tensor(out, dtype=torch.float64)


def num_selected(num_tensors: int, numerator: int, denominator: int) -> int:
    """k = ceil(fraction * M) in exact rational arithmetic, clamped to [1, M] (0 when M = 0)."""
    if num_tensors == 0:
        return 0
    return min(num_tensors, max(1, math.ceil(Fraction(numerator, denominator) * num_tensors)))


def rank_order(norms: list[float]) -> list[int]:
    """All indices by descending norm, NaN first, ties to the smaller index."""
    return sorted(range(len(norms)), key=lambda i: (0, 0.0, i) if math.isnan(norms[i]) else (1, -norms[i], i))


def masked_weighted_average(
    dst: list[torch.Tensor], sent: list[tuple[torch.Tensor, list[torch.Tensor], float]]
) -> list[torch.Tensor]:
    """New list: dst[t] = sum_k w_k x_k / sum_k w_k (float64, cast back) over the clients that sent t."""
    out = [d.clone() for d in dst]
    for t in range(len(dst)):
        num = torch.zeros(dst[t].shape, dtype=torch.float64)
        den = 0.0
        for idx, tensors, w in sent:
            for i, x in zip(idx.tolist(), tensors, strict=True):
                if i == t:
                    num += w * x.double().cpu()
                    den += w
        if any(t in idx.tolist() for idx, _, _ in sent):
            out[t] = (num / den).to(dst[t].dtype)
    return out
