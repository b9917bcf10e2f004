"""Slow, obvious versions of the data helpers: a line-by-line XC parser and per-entry feature hashing."""

from __future__ import annotations

import math


def parse_xc(text: str) -> tuple[tuple[int, int, int], list[set[int]], list[dict[int, float]]]:
    lines = text.split("\n")
    n, f, l = (int(x) for x in lines[0].split())
    labels, feats = [], []
    for line in lines[1 : 1 + n]:
        lab, fs = set(), {}
        for i, tok in enumerate(line.split(" ")):
            if not tok:
                continue
            if ":" in tok:
                k, v = tok.split(":")
                fs[int(k)] = fs.get(int(k), 0.0) + float(v)
            elif i == 0:
                lab = {int(x) for x in tok.split(",")}
        labels.append(lab)
        feats.append(fs)
    return (n, f, l), labels, feats


def hash_row(
    row: dict[int, float], bucket: list[int], sign: list[int], dim: int, idf=None, l2: bool = False
) -> list[float]:
    out = [0.0] * dim
    for fid, v in row.items():
        out[bucket[fid]] += sign[fid] * v * (idf[fid] if idf is not None else 1.0)
    if l2:
        norm = math.sqrt(sum(x * x for x in out))
        if norm > 0:
            out = [x / norm for x in out]
    return out
