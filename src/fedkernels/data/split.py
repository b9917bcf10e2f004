"""Reproducible train/test splits for datasets without an official one (the ``all.txt`` files)."""

from __future__ import annotations

import numpy as np

from ..seeding import numpy_rng


def train_test_split(num_samples: int, test_fraction: float = 0.2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded permutation cut into train and test row indices.

    Args:
        num_samples: N.
        test_fraction: share of samples in the test set, in ``[0, 1]``; ``round(test_fraction * N)``.
        seed: the split is a pure function of ``(N, test_fraction, seed)``.

    Returns:
        ``(train int64 [N - m], test int64 [m])``, each sorted ascending.
    """
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction}")
    perm = numpy_rng(seed, "train_test_split").permutation(num_samples)
    m = round(test_fraction * num_samples)
    return np.sort(perm[m:]).astype(np.int64), np.sort(perm[:m]).astype(np.int64)
