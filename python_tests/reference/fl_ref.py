"""Slow, obvious references for the federated loop's semantics (partial exchange, FedMLH averaging)."""

from __future__ import annotations

import math

import numpy as np
import torch


def drift(before: torch.Tensor, after: torch.Tensor, how: str) -> float:
    """A tensor's change: its L2 norm, over sqrt(numel) ("rms") or over numel ("numel")."""
    d = float(torch.linalg.vector_norm((after.double() - before.double()).reshape(-1)))
    if how == "rms":
        return d / max(1, after.numel()) ** 0.5
    if how == "numel":
        return d / max(1, after.numel())
    return d


def select(before: dict, after: dict, fraction: float, how: str = "norm", threshold: float | None = None) -> list[str]:
    """The names a client uploads: drift above ``threshold``, else the ceil(fraction * M) largest
    (descending, ties to the earlier tensor), in ``after``'s order of names."""
    names = list(after)
    score = {n: drift(before[n], after[n], how) for n in names}
    if threshold is not None:
        return [n for n in names if score[n] > threshold]
    k = min(len(names), max(1, math.ceil(fraction * len(names) - 1e-9)))
    ranked = sorted(range(len(names)), key=lambda i: (-score[names[i]], i))[:k]
    return [names[i] for i in sorted(ranked)]


def clients_on_shared_test(scores: list[torch.Tensor], labels: list[set[int]], k: int) -> dict[str, float]:
    """The partial-exchange paper's evaluation, slowly: each client's class scores ``[N, p]`` of the same
    test rows ranked (descending, ties to the smaller class), P@k and nDCG@k per client by the textbook
    formulas, then the plain mean over the clients."""
    from python_tests.reference.metrics_ref import ndcg_at_k, precision_at_k

    out = {f"P@{k}": 0.0, f"nDCG@{k}": 0.0}
    for sc in scores:
        topk = [sorted(range(row.numel()), key=lambda c, row=row: (-float(row[c]), c))[:k] for row in sc]
        out[f"P@{k}"] += precision_at_k(topk, labels, k) / len(scores)
        out[f"nDCG@{k}"] += ndcg_at_k(topk, labels, k) / len(scores)
    return out


def weighted_mean(tensors: list[torch.Tensor], weights: list[float]) -> torch.Tensor:
    total = sum(weights)
    return sum(w * t.double() for w, t in zip(weights, tensors, strict=True)) / total


def project_l1_ball(v: np.ndarray, radius: float) -> np.ndarray:
    """Euclidean projection of ``v`` onto ``{x: ||x||_1 <= radius}`` by bisection on the threshold
    theta of ``sign(v) max(|v| - theta, 0)`` (float64, slow and obvious)."""
    v = np.asarray(v, np.float64)
    if np.abs(v).sum() <= radius:
        return v.copy()
    lo, hi = 0.0, float(np.abs(v).max())
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.maximum(np.abs(v) - mid, 0).sum() > radius:
            lo = mid
        else:
            hi = mid
    return np.sign(v) * np.maximum(np.abs(v) - hi, 0)


def graph_prox_inf_slow(y: np.ndarray, edges: np.ndarray, lam: float, weights: np.ndarray | None = None) -> np.ndarray:
    """min_Z 0.5||Z - Y||^2 + lam sum_e w_e ||z_i - z_j||_inf by SLSQP on the epigraph form
    (one t_e per edge with t_e >= +-(z_i - z_j)_c for every coordinate c). Tiny problems only."""
    from scipy.optimize import minimize

    y = np.asarray(y, np.float64)
    n, dim = y.shape
    e = len(edges)
    w = np.ones(e) if weights is None else np.asarray(weights, np.float64)
    x0 = np.concatenate([y.ravel(), [np.abs(y[i] - y[j]).max() for i, j in edges]])

    def f(x):
        return 0.5 * ((x[: n * dim].reshape(n, dim) - y) ** 2).sum() + lam * (x[n * dim :] * w).sum()

    cons = []
    for ei, (i, j) in enumerate(edges):
        for c in range(dim):
            for s in (1.0, -1.0):
                cons.append(
                    {
                        "type": "ineq",
                        "fun": lambda x, i=i, j=j, c=c, ei=ei, s=s: (
                            x[n * dim + ei] - s * (x[i * dim + c] - x[j * dim + c])
                        ),
                    }
                )
    res = minimize(f, x0, constraints=cons, method="SLSQP", options={"ftol": 1e-14, "maxiter": 2000})
    return res.x[: n * dim].reshape(n, dim)


def spread_objective(
    W: torch.Tensor, k: int, margin: float, alpha: torch.Tensor | None, scale: torch.Tensor | None, form: str
) -> torch.Tensor:
    """``sum_c sum_{c' in kNN(c)} s_c alpha[c, c'] phi(||w_c - w_c'||)`` (l2) over the exact kNN of a
    float64 distance matrix, phi the squared hinge or ``-d^2``; ``alpha`` dense [C, C] or None."""
    from python_tests.reference.spread_ref import knn

    _, idx = knn(W, k, "l2")
    c = W.shape[0]
    dist = torch.linalg.vector_norm(W[:, None, :] - W[idx], dim=-1)
    a = torch.ones(c, k, dtype=W.dtype) if alpha is None else alpha.to(W)[torch.arange(c)[:, None], idx]
    s = torch.ones(c, dtype=W.dtype) if scale is None else scale.to(W)
    phi = torch.clamp(margin - dist, min=0) ** 2 if form == "hinge" else -(dist**2)
    return (s[:, None] * a * phi).sum()


def map_at_r(emb: np.ndarray, labels: list[set[int]]) -> float:
    """Retrieval MAP@R by loops: relevant = sharing a label; rank the others by cosine (ties to the
    smaller index); average precision over the top R, R = number of relevant others."""
    e = np.asarray(emb, np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-300)
    n, scores = len(labels), []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        rel = {j for j in others if labels[i] & labels[j]}
        if not rel:
            continue
        ranked = sorted(others, key=lambda j: (-float(e[i] @ e[j]), j))[: len(rel)]
        hits, total = 0, 0.0
        for pos, j in enumerate(ranked, start=1):
            if j in rel:
                hits += 1
                total += hits / pos
        scores.append(total / len(rel))
    return float(np.mean(scores)) if scores else 0.0


def retrieval_map_at_k(emb: np.ndarray, labels: list[set[int]], k: int) -> float:
    """Retrieval MAP@k by its definition: each sample with a relevant other sample (one sharing a
    label) ranks the others by cosine (ties to the smaller index) and scores
    ``sum_{j <= k} P@j rel_j / min(k, R)``; the mean over those samples."""
    e = np.asarray(emb, np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-300)
    n, scores = len(labels), []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        rel = {j for j in others if labels[i] & labels[j]}
        if not rel:
            continue
        ranked = sorted(others, key=lambda j: (-float(e[i] @ e[j]), j))[:k]
        hits, total = 0, 0.0
        for pos, j in enumerate(ranked, start=1):
            if j in rel:
                hits += 1
                total += hits / pos
        scores.append(total / min(k, len(rel)))
    return float(np.mean(scores)) if scores else 0.0
