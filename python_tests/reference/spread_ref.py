"""Reference spreadout ops: the full [C, C] distance matrix in float64 and the direct loss formula."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def _sequential_sum(terms) -> np.ndarray:
    total = 0.0
    for t in terms:  # in dimension order, one IEEE add at a time (no pairwise/vectorised reordering)
        total = total + t
    return total


def distance_matrix(W: torch.Tensor, metric: str) -> torch.Tensor:
    """Float64 ``[C, C]`` true distances, summed over dims in order.

    l2: Euclidean (not squared). cosine: ``1 - cos`` written as ``|u_a - u_b|^2 / 2`` with
    ``u = w / |w|`` when both norms exceed 1e-12 (equal directions give exactly 0), else
    ``1 - a.b / (max(|a|, 1e-12) max(|b|, 1e-12))``.
    """
    A = W.detach().to(torch.float64).cpu().numpy()
    d = A.shape[1]
    if metric == "l2":
        return torch.from_numpy(np.sqrt(_sequential_sum((A[:, None, i] - A[None, :, i]) ** 2 for i in range(d))))
    norms = np.sqrt(_sequential_sum(A[:, i] ** 2 for i in range(d)))
    U = A / np.where(norms > 1e-12, norms, 1.0)[:, None]
    unit = 0.5 * _sequential_sum((U[:, None, i] - U[None, :, i]) ** 2 for i in range(d))
    clamped = np.maximum(norms, 1e-12)
    dot = _sequential_sum(A[:, None, i] * A[None, :, i] for i in range(d))
    other = 1.0 - dot / (clamped[:, None] * clamped[None, :])
    both = (norms[:, None] > 1e-12) & (norms[None, :] > 1e-12)
    return torch.from_numpy(np.where(both, unit, other))


def knn(W: torch.Tensor, k: int, metric: str) -> tuple[torch.Tensor, torch.Tensor]:
    """k nearest other classes per row by (distance, index): a stable sort of each row."""
    D = distance_matrix(W, metric)
    D.fill_diagonal_(float("inf"))
    order = torch.sort(D, dim=1, stable=True).indices[:, :k]
    return torch.gather(D, 1, order), order


def spreadout_loss(W: torch.Tensor, margin: float, k: int, alpha: torch.Tensor | None, metric: str) -> torch.Tensor:
    """The direct formula, differentiable by autograd; ``alpha`` dense ``[C, C]`` or None (all ones)."""
    _, idx = knn(W, k, metric)
    idx = idx.to(W.device)
    if metric == "l2":
        dist = torch.linalg.vector_norm(W[:, None, :] - W[idx], dim=-1)
    else:
        U = F.normalize(W, dim=1, eps=1e-12)
        dist = 1.0 - (U[:, None, :] * U[idx]).sum(-1)
    weight = torch.ones_like(dist) if alpha is None else alpha.to(W)[torch.arange(W.shape[0])[:, None], idx]
    return (weight * torch.clamp(margin - dist, min=0) ** 2).sum()
