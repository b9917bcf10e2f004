"""Slow, obvious public-segmentation helpers (loops over values), the reference for
fedkernels.fl.privacy.segments."""

from __future__ import annotations

import numpy as np


def runs_slow(values: np.ndarray) -> list[int]:
    """Lengths of the maximal stretches of equal neighbouring values, one value at a time."""
    out: list[int] = []
    for i, v in enumerate(values):
        if i > 0 and v == values[i - 1]:
            out[-1] += 1
        else:
            out.append(1)
    return out


def segment_means_slow(values: np.ndarray, lengths: list[int]) -> np.ndarray:
    """The mean of each segment, summed value by value."""
    out, at = [], 0
    for n in lengths:
        total = 0.0
        for v in values[at : at + n]:
            total += float(v)
        out.append(total / n)
        at += n
    return np.array(out)


def expand_slow(means: np.ndarray, lengths: list[int]) -> np.ndarray:
    """Each mean written out over its segment."""
    return np.array([m for m, n in zip(means, lengths, strict=True) for _ in range(n)])
