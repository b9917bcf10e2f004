"""Metrics by the textbook formulas, one sample at a time."""

from __future__ import annotations

import math


def precision_at_k(topk: list[list[int]], labels: list[set[int]], k: int) -> float:
    return sum(len(set(p[:k]) & y) / k for p, y in zip(topk, labels, strict=True)) / len(labels)


def ndcg_at_k(topk: list[list[int]], labels: list[set[int]], k: int) -> float:
    total = 0.0
    for p, y in zip(topk, labels, strict=True):
        dcg = sum(1 / math.log2(i + 2) for i, c in enumerate(p[:k]) if c in y)
        idcg = sum(1 / math.log2(i + 2) for i in range(min(k, len(y))))
        total += dcg / idcg if idcg > 0 else 0.0
    return total / len(labels)


def inverse_propensity(counts: list[int], n: int, a: float = 0.55, b: float = 1.5) -> list[float]:
    c = (math.log(n) - 1) * (b + 1) ** a
    return [1 / (1 / (1 + c * math.exp(-a * math.log(nl + b)))) for nl in counts]


def psp_at_k(topk: list[list[int]], labels: list[set[int]], inv_p: list[float], k: int, normalize: bool) -> float:
    got = sum(sum(inv_p[c] for c in p[:k] if c in y) / k for p, y in zip(topk, labels, strict=True)) / len(labels)
    if not normalize:
        return got
    best = sum(sum(sorted((inv_p[c] for c in y), reverse=True)[:k]) / k for y in labels) / len(labels)
    return got / best if best > 0 else 0.0


def split_precision_at_k(topk, labels, frequent: set[int], k: int) -> tuple[float, float]:
    f = sum(len([c for c in p[:k] if c in y and c in frequent]) / k for p, y in zip(topk, labels, strict=True)) / len(
        labels
    )
    i = sum(
        len([c for c in p[:k] if c in y and c not in frequent]) / k for p, y in zip(topk, labels, strict=True)
    ) / len(labels)
    return f, i


def map_at_k(topk: list[list[int]], labels: list[set[int]], k: int) -> float:
    total = 0.0
    for p, y in zip(topk, labels, strict=True):
        if not y:
            continue
        hits, s = 0, 0.0
        for i, c in enumerate(p[:k]):
            if c in y:
                hits += 1
                s += hits / (i + 1)
        total += s / min(k, len(y))
    return total / len(labels)


# ---- The Extreme Classification Repository's definitions (Jain et al. 2016; the repository's
# pyxclib ``xc_metrics``), written from the published formulas one sample at a time.


def _dcg(gains: list[float]) -> float:
    return sum(g / math.log2(r + 1) for r, g in enumerate(gains, start=1))


def recall_at_k(topk: list[list[int]], labels: list[set[int]], k: int) -> float:
    return sum(len(set(p[:k]) & y) / max(len(y), 1) for p, y in zip(topk, labels, strict=True)) / len(labels)


def psndcg_at_k(topk: list[list[int]], labels: list[set[int]], inv_p: list[float], k: int, normalize: bool) -> float:
    """mean_i PSDCG_i@k / IDCG(min(k, |y_i|)); normalised by the same mean of the ideal ranking."""

    def mean(gains_of) -> float:
        total = 0.0
        for p, y in zip(topk, labels, strict=True):
            idcg = _dcg([1.0] * min(k, len(y)))
            total += _dcg(gains_of(p, y)) / idcg if idcg > 0 else 0.0
        return total / len(labels)

    got = mean(lambda p, y: [inv_p[c] if c in y else 0.0 for c in p[:k]])
    if not normalize:
        return got
    best = mean(lambda p, y: sorted((inv_p[c] for c in y), reverse=True)[:k])
    return got / best if best > 0 else 0.0


def filter_predictions(topk: list[list[int]], filters: list[set[int]], k: int) -> list[list[int]]:
    out = []
    for p, f in zip(topk, filters, strict=True):
        kept = [c for c in p if c not in f][:k]
        out.append(kept + [-1] * (k - len(kept)))
    return out
