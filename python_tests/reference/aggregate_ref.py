"""Slow, obvious references of the server's aggregation (fedkernels.fl.aggregate)."""

from __future__ import annotations

import torch


def weighted_average(states: list[dict[str, torch.Tensor]], weights: list[float]) -> dict[str, torch.Tensor]:
    """``sum_k w_k s_k / sum_k w_k`` per name, element by element in float64."""
    total = sum(float(w) for w in weights)
    out = {}
    for name, first in states[0].items():
        acc = torch.zeros(first.shape, dtype=torch.float64)
        for s, w in zip(states, weights, strict=True):
            acc += float(w) * s[name].double()
        out[name] = acc / total
    return out


def weighted_rows_mean(
    table: torch.Tensor, ids: list[torch.Tensor], rows: list[torch.Tensor], weights: list[float]
) -> torch.Tensor:
    """Row r: the float64 weighted mean of the rows sent for r by clients of weight > 0; others unchanged."""
    out = table.double().clone()
    num = {}
    den = {}
    for idx, src, w in zip(ids, rows, weights, strict=True):
        if w <= 0:
            continue
        for t, r in enumerate(idx.tolist()):
            num[r] = num.get(r, 0.0) + float(w) * src[t].double()
            den[r] = den.get(r, 0.0) + float(w)
    for r in num:
        out[r] = num[r] / den[r]
    return out


def weighted_rows_update(
    table: torch.Tensor, ids: list[torch.Tensor], rows: list[torch.Tensor], weights: list[float]
) -> torch.Tensor:
    """The FedSS paper's Algorithm 1, line 12, as written, in float64: each client's update is its
    returned rows minus the table's, zero-padded to the whole table, scaled by ``w_k / sum_j w_j`` (the
    sum over every client); the table moves by the sum of the scaled updates."""
    total = sum(float(w) for w in weights)
    old = table.double()
    step = torch.zeros_like(old)
    for idx, src, w in zip(ids, rows, weights, strict=True):
        padded = torch.zeros_like(old)
        for t, r in enumerate(idx.tolist()):
            padded[r] += src[t].double() - old[r]
        step += (float(w) / total) * padded if total > 0 else 0.0 * padded
    return old + step
