"""Optimal 1D k-means quantisation of run values (exact DP, compiled in fedkernels._C)."""

from __future__ import annotations

import torch

from .. import _C


def kmeans_1d(values: torch.Tensor, weights: torch.Tensor | None, k: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Exact weighted 1D k-means: minimise ``sum_i w_i (v_i - c_{label_i})^2`` over k centres.

    Solved by dynamic programming over the sorted distinct values with the monotone-split
    (divide and conquer) speed-up: O(k n log n) time, O(k n) memory, n = distinct values.

    Args:
        values: ``[m]`` finite floats.
        weights: ``[m]`` positive weights (e.g. run lengths), or None for all ones.
        k: number of clusters, >= 1 (fewer are used if there are fewer distinct values).

    Returns:
        ``(centres float64 [k'] ascending, labels int64 [m], cost float)``.

    Example:
        >>> c, lab, cost = kmeans_1d(torch.tensor([0., 0.1, 5., 5.2]), torch.tensor([1., 1., 2., 2.]), 2)
        >>> c, lab   # (tensor([0.05, 5.1]), tensor([0, 0, 1, 1]))
    """
    v = values.detach().to("cpu", torch.float64).reshape(-1)
    w = torch.ones_like(v) if weights is None else weights.detach().to("cpu", torch.float64).reshape(-1)
    if w.numel() != v.numel():
        raise ValueError(f"weights must have one entry per value ({v.numel()}), got {w.numel()}")
    centres, labels, cost = _C.kmeans1d(v.tolist(), w.tolist(), int(k))
    return torch.tensor(centres, dtype=torch.float64), torch.tensor(labels, dtype=torch.int64), float(cost)


def quantize_runs(x: torch.Tensor, k: int) -> torch.Tensor:
    """Replace the run values of ``x`` (flattened) by their optimal k-means centres.

    Runs are weighted by their lengths, so this is the best k-level approximation of ``x`` in
    squared error among those constant on x's runs. Adjacent runs that land on one centre merge,
    so the result encodes in fewer runs (and at most k distinct values).

    Args:
        x: float32 ``[...]`` piecewise-constant tensor.
        k: number of levels, >= 1.

    Returns:
        float32 tensor of x's shape with at most k distinct values.

    Example:
        >>> quantize_runs(torch.tensor([1.0, 1.0, 1.1, 3.0]), 2)   # tensor([1.0333, 1.0333, 1.0333, 3.])
    """
    if x.dtype != torch.float32:
        raise ValueError(f"x must be float32, got {x.dtype}")
    if x.numel() == 0:
        return x.clone()
    flat = x.detach().reshape(-1).cpu()
    vals, counts = torch.unique_consecutive(flat, return_counts=True)
    centres, labels, _ = kmeans_1d(vals, counts.to(torch.float64), k)
    q = centres.to(torch.float32)[labels]
    return torch.repeat_interleave(q, counts).reshape(x.shape).to(x.device)
