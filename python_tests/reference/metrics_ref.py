"""Metrics by the textbook formulas, one sample at a time."""

from __future__ import annotations

import math


def precision_at_k(topk: list[list[int]], labels: list[set[int]], k: int) -> float:
    return sum(len(set(p[:k]) & y) / k for p, y in zip(topk, labels)) / len(labels)


def ndcg_at_k(topk: list[list[int]], labels: list[set[int]], k: int) -> float:
    total = 0.0
    for p, y in zip(topk, labels):
        dcg = sum(1 / math.log2(i + 2) for i, c in enumerate(p[:k]) if c in y)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(k, len(y))))
        total += dcg / idcg if idcg > 0 else 0.0
    return total / len(labels)
