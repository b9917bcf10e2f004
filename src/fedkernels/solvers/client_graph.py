"""kNN similarity graphs between clients, for the personalised (network) l1-difference variant."""

from __future__ import annotations

import torch


def knn_graph(points: torch.Tensor, k: int, metric: str = "cosine") -> tuple[torch.Tensor, torch.Tensor]:
    """Undirected kNN graph: each client joined to its k nearest other clients.

    Args:
        points: float ``[n, D]``, one row per client (a flattened model, or covariance features).
        k: neighbours per client, ``0 <= k < n``.
        metric: ``"cosine"`` (distance 1 - cos) or ``"l2"``.

    Returns:
        ``(edges int64 [E, 2], dist [E])``: the union of the kNN relations as pairs ``i < j``, sorted,
        each once, with their distances. Ties go to the smaller client id.

    Example:
        >>> models = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
        >>> knn_graph(models, 1)    # (tensor([[0, 1], [1, 2]]), tensor([0.0061, 0.8896]))
    """
    if not isinstance(points, torch.Tensor) or points.dim() != 2 or not points.is_floating_point():
        raise ValueError(f"points must be a float [n, D] tensor, got {getattr(points, 'shape', type(points))}")
    if metric not in ("cosine", "l2"):
        raise ValueError(f"metric must be 'cosine' or 'l2', got {metric!r}")
    n = points.shape[0]
    if not 0 <= k < max(n, 1):
        raise ValueError(f"k must be in [0, n) = [0, {n}), got {k}")
    if not torch.isfinite(points).all():
        raise ValueError("points must be finite")
    x = points.double()
    if metric == "cosine":
        xn = x / torch.clamp(torch.linalg.vector_norm(x, dim=1, keepdim=True), min=1e-300)
        dist = (1.0 - xn @ xn.T).clamp(min=0.0)
    else:
        sq = (x * x).sum(1)
        dist = (sq[:, None] + sq[None, :] - 2.0 * x @ x.T).clamp(min=0.0).sqrt()
    dist.fill_diagonal_(float("inf"))
    # stable sort: equal distances keep the smaller id first
    nbr = torch.sort(dist, dim=1, stable=True).indices[:, :k]
    rows = torch.arange(n, device=x.device).repeat_interleave(k)
    cols = nbr.reshape(-1)
    pairs = torch.stack([torch.minimum(rows, cols), torch.maximum(rows, cols)], 1)
    edges = torch.unique(pairs, dim=0) if pairs.numel() else pairs.reshape(0, 2)
    d = dist[edges[:, 0], edges[:, 1]]
    return edges.to(points.device), d.to(points.dtype).to(points.device)


def model_space_graph(
    models: list[list[torch.Tensor]] | torch.Tensor, k: int, metric: str = "cosine"
) -> tuple[torch.Tensor, torch.Tensor]:
    """kNN graph between clients from their models (each a list of tensors, or rows of ``[n, D]``).

    Example:
        >>> edges, dist = model_space_graph([[w1, b1], [w2, b2], [w3, b3]], k=1)
    """
    if isinstance(models, torch.Tensor):
        return knn_graph(models, k, metric)
    flat = torch.stack([torch.cat([t.detach().reshape(-1).double() for t in m]) for m in models])
    return knn_graph(flat, k, metric)


def feature_space_graph(features: list[torch.Tensor], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """kNN graph between clients from their feature covariances (Frobenius / L2 distance).

    Args:
        features: one ``[N_i, F]`` float tensor per client (its local inputs); the covariance is
            ``F x F``, so F must be moderate (hash or project wide inputs first).
        k: neighbours per client.

    Example:
        >>> edges, dist = feature_space_graph([x_client0, x_client1, x_client2], k=1)
    """
    covs = []
    for i, x in enumerate(features):
        if x.dim() != 2 or x.shape[0] < 2:
            raise ValueError(f"features[{i}] must be [N_i >= 2, F], got {tuple(x.shape)}")
        xc = x.double() - x.double().mean(0, keepdim=True)
        covs.append(((xc.T @ xc) / (x.shape[0] - 1)).reshape(-1))
    if len({c.numel() for c in covs}) > 1:
        raise ValueError("features must all have the same number of columns F")
    return knn_graph(torch.stack(covs), k, "l2")


def kernel_graph(
    features: list[torch.Tensor], k: int, bandwidth: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """kNN graph between clients with Gaussian-kernel edge weights on their mean feature vectors.

    Each client is its kernel mean embedding under a linear feature map, ``mu_i = mean of its rows``;
    it is joined to its k nearest others (L2), and edge ``(i, j)`` weighs
    ``exp(-||mu_i - mu_j||^2 / (2 sigma^2))`` with ``sigma`` = ``bandwidth`` or the median edge length,
    so similar clients are coupled harder (for :func:`~fedkernels.solvers.graph_prox` ``weights``).

    Args:
        features: one ``[N_i, F]`` float tensor per client (dense or sparse CSR).
        k: neighbours per client.
        bandwidth: the kernel width sigma (> 0), or None for the median edge length.

    Returns:
        ``(edges int64 [E, 2], weights float64 [E])`` with weights in (0, 1].
    """
    means = []
    for i, x in enumerate(features):
        if x.dim() != 2 or x.shape[0] < 1:
            raise ValueError(f"features[{i}] must be [N_i >= 1, F], got {tuple(x.shape)}")
        dense = x.to_dense() if x.layout == torch.sparse_csr else x
        means.append(dense.double().mean(0))
    if len({m.numel() for m in means}) > 1:
        raise ValueError("features must all have the same number of columns F")
    if bandwidth is not None and not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    edges, dist = knn_graph(torch.stack(means), k, "l2")
    d = dist.double()
    sigma = float(bandwidth) if bandwidth is not None else float(d.median()) if d.numel() else 1.0
    sigma = sigma if sigma > 0 else 1.0
    return edges, torch.exp(-(d * d) / (2.0 * sigma * sigma))
