"""A small reader of the Extreme Classification Repository text format, for the benchmarks."""

from __future__ import annotations

from pathlib import Path

import torch

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def read_xc(path: Path, limit: int | None = None) -> tuple[torch.Tensor, list[list[int]], int]:
    """Dense float32 features ``[N, F]``, label lists and the label count of an XC file
    (header ``N F L``, then ``l1,l2 f:v f:v ...`` per line)."""
    with open(path) as f:
        n, nf, nl = map(int, f.readline().split())
        n = n if limit is None else min(n, limit)
        x = torch.zeros(n, nf)
        labels: list[list[int]] = []
        for i in range(n):
            line = f.readline().rstrip("\n")
            labs, _, feats = line.partition(" ")
            labels.append([int(v) for v in labs.split(",") if v])
            for fv in feats.split():
                k, v = fv.split(":")
                x[i, int(k)] = float(v)
    return x, labels, nl


def multi_hot(labels: list[list[int]], num_labels: int) -> torch.Tensor:
    """float32 ``[N, L]`` 0/1 matrix of label lists."""
    y = torch.zeros(len(labels), num_labels)
    for i, ls in enumerate(labels):
        y[i, ls] = 1.0
    return y
