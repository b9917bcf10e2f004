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


def dirichlet_sample_ref(
    labels: list[list[int]], num_clients: int, beta: float, fraction: float, seed: int
) -> list[list[int]]:
    """The partial-exchange authors' label-skewed sampling (FL4Health's DirichletLabelBasedSampler), one
    sample at a time: a sample's class is its most frequent label over the dataset (ties to the smaller
    id; -1 without labels); client c draws shares q ~ Dirichlet(beta) over the classes present, in
    ascending order, from the stream ``numpy_rng(seed, "dirichlet-sample", c)``, then for each class
    ceil(q * n) uniform draws with replacement among its samples (n = floor(fraction * N)), keeps the
    first n draws and returns them sorted."""
    from fedkernels.seeding import numpy_rng

    freq: dict[int, int] = {}
    for labs in labels:
        for lab in labs:
            freq[lab] = freq.get(lab, 0) + 1
    primary = [min(labs, key=lambda lab: (-freq[lab], lab)) if labs else -1 for labs in labels]
    classes = sorted(set(primary))
    members = {c: [i for i, p in enumerate(primary) if p == c] for c in classes}
    n = int(fraction * len(labels))
    out = []
    for c in range(num_clients):
        rng = numpy_rng(seed, "dirichlet-sample", c)
        shares = rng.dirichlet([float(beta)] * len(classes))
        drawn: list[int] = []
        for cls, share in zip(classes, shares, strict=True):
            picks = rng.integers(0, len(members[cls]), size=math.ceil(float(share) * n))
            drawn.extend(members[cls][int(t)] for t in picks)
        out.append(sorted(drawn[:n]))
    return out
