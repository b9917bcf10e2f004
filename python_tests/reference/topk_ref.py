"""Slow, obvious reference of linear_topk: dense float64 scores, then a lexicographic sort."""

from __future__ import annotations

import numpy as np
import torch


def dense_scores(h: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None, scale: float) -> torch.Tensor:
    """float64 ``[N, p]``: ``scale * h @ W.T + bias`` from the inputs' exact values."""
    s = scale * (h.double() @ W.double().T)
    return s + bias.double() if bias is not None else s


def score_error_bound(h: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None, scale: float) -> torch.Tensor:
    """float64 ``[N, p]``: a bound on |float32 kernel score - exact score|.

    A float32 sum of d products in any order errs by at most ``d * u * sum_q |h_q w_q|`` (first order,
    u = 2^-24); the product with scale and the bias add round once each (u times their magnitude).
    Doubled for the neglected higher-order terms.
    """
    u = 2.0**-24
    d = h.shape[1]
    absdot = h.double().abs() @ W.double().abs().T
    s = (scale * (h.double() @ W.double().T)).abs()
    b = bias.double().abs() if bias is not None else torch.zeros(W.shape[0], dtype=torch.float64)
    return 2.0 * (d * u * abs(scale) * absdot + u * (s + b) + u * (s + b + d * u * abs(scale) * absdot))


def topk_order(scores: torch.Tensor) -> np.ndarray:
    """``[N, p]`` class ids per row in the op's order: NaN first, then descending value, ties by id."""
    s = scores.double().numpy()
    n, p = s.shape
    out = np.empty((n, p), dtype=np.int64)
    ids = np.arange(p)
    for r in range(n):
        nan = np.isnan(s[r])
        vals = np.where(nan, 0.0, s[r]) + 0.0  # +0.0: -0 and +0 are one value
        out[r] = np.lexsort((ids, -vals, ~nan))  # last key first: NaN, then value, then id
    return out


def linear_topk(
    h: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None, k: int, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values float64 ``[N, k]``, indices int64 ``[N, k]``) of the exact scores."""
    s = dense_scores(h, W, bias, scale)
    order = torch.from_numpy(topk_order(s)[:, :k].copy())
    return torch.gather(s, 1, order), order
