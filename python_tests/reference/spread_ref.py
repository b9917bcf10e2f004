"""Reference spreadout ops: the full [C, C] distance matrix in float64 and the direct loss formula."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def distance_matrix(W: torch.Tensor, metric: str) -> torch.Tensor:
    """Float64 ``[C, C]`` true distances: l2 Euclidean (not squared), cosine ``1 - cos``."""
    W = W.detach().to(torch.float64).cpu()
    if metric == "l2":
        return ((W[:, None, :] - W[None, :, :]) ** 2).sum(-1).sqrt()
    norms = W.norm(dim=1).clamp_min(1e-12)
    return 1.0 - (W @ W.T) / (norms[:, None] * norms[None, :])


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
