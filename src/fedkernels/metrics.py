"""Ranking metrics for multi-label prediction, and communication accounting.

Ground truth is CSR (``indptr [N+1]``, ``indices [nnz]``); predictions are top-k class ids ``[N, k]``
(best first). Samples without labels count as zero in every mean (they cannot be predicted right).
"""

from __future__ import annotations


import torch


def _hits(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """bool ``[N, k]``: whether each predicted id is a true label of its sample."""
    n, k = topk.shape
    if n == 0 or k == 0:
        return torch.zeros(n, k, dtype=torch.bool)
    rows = torch.repeat_interleave(torch.arange(n), indptr.diff())
    # A sample's true labels as sorted keys row * P + label, searched for every prediction.
    p = int(max(int(indices.max()) if indices.numel() else 0, int(topk.max())) + 1)
    keys = torch.sort(rows * p + indices).values
    q = (torch.arange(n).unsqueeze(1) * p + topk).reshape(-1)
    pos = torch.searchsorted(keys, q).clamp_max(max(keys.numel() - 1, 0))
    found = keys[pos] == q if keys.numel() else torch.zeros_like(q, dtype=torch.bool)
    return found.view(n, k)


def precision_at_k(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, k: int) -> float:
    """P@k = mean over samples of |top-k ∩ labels| / k.

    Args:
        topk: int64 ``[N, >=k]`` predicted class ids, best first.
        indptr, indices: CSR ground truth.
    """
    if k < 1 or topk.shape[1] < k:
        raise ValueError(f"k must be in [1, {topk.shape[1]}], got {k}")
    if topk.shape[0] == 0:
        return 0.0
    return float(_hits(topk[:, :k], indptr, indices).sum(1).float().mean() / k)


def ndcg_at_k(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, k: int) -> float:
    """nDCG@k with binary relevance: DCG@k / IDCG@k where IDCG uses min(k, |labels|) hits."""
    if k < 1 or topk.shape[1] < k:
        raise ValueError(f"k must be in [1, {topk.shape[1]}], got {k}")
    n = topk.shape[0]
    if n == 0:
        return 0.0
    disc = 1.0 / torch.log2(torch.arange(k, dtype=torch.float64) + 2.0)
    dcg = (_hits(topk[:, :k], indptr, indices).double() * disc).sum(1)
    nlab = indptr.diff().clamp_max(k)
    idcg = torch.cumsum(disc, 0)[(nlab - 1).clamp_min(0)] * (nlab > 0)
    return float(torch.where(idcg > 0, dcg / idcg.clamp_min(1e-30), torch.zeros_like(dcg)).mean())


def ranking_metrics(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor,
                    ks: tuple[int, ...] = (1, 3, 5)) -> dict[str, float]:
    """P@k and nDCG@k for every k in ``ks`` that the prediction width allows."""
    out: dict[str, float] = {}
    for k in ks:
        if k <= topk.shape[1]:
            out[f"P@{k}"] = precision_at_k(topk, indptr, indices, k)
            out[f"nDCG@{k}"] = ndcg_at_k(topk, indptr, indices, k)
    return out
