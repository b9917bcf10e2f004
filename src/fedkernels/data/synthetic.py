"""A synthetic power-law multi-label dataset: the embedded default of ``fedkernels run``.

Class popularity falls as ``(rank + 1) ** -exponent`` (a few head classes, a long tail, like real
extreme-classification data). Each class has a random prototype direction; a sample's features
are the normalised sum of its labels' prototypes plus Gaussian noise, so labels are learnable.
"""

from __future__ import annotations

import numpy as np
import torch

from ..seeding import numpy_rng
from .types import ClientData

CHUNK_VALUES = 1 << 23
"""Gumbel keys :func:`synthetic_multilabel` holds at once (float64: 64 MiB)."""


def _largest_first(keys: np.ndarray, k: int) -> np.ndarray:
    """Per row, the ids of the ``k`` largest keys, largest first: ``[rows, k]``. A partition, then a
    sort of those ``k`` only (a full argsort of p = 312330 keys per row was most of the time)."""
    if k >= keys.shape[1]:
        return np.argsort(-keys, axis=1, kind="stable")
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1)


def synthetic_multilabel(
    num_samples: int = 4000,
    num_features: int = 64,
    num_classes: int = 200,
    labels_per_sample: float = 2.0,
    exponent: float = 1.0,
    noise: float = 0.5,
    seed: int = 0,
) -> ClientData:
    """Draw a power-law multi-label dataset.

    Args:
        num_samples: N.
        num_features: F.
        num_classes: p.
        labels_per_sample: mean label count (each sample has ``1 + Poisson(labels_per_sample - 1)``
            labels, at most p), >= 1.
        exponent: class popularity ``∝ (rank + 1) ** -exponent``; 0 is uniform.
        noise: norm (in expectation) of the Gaussian feature noise; the signal has norm about 1.
        seed: the dataset is a pure function of its arguments.

    Returns:
        :class:`~fedkernels.fl.ClientData` with ``x`` float32 ``[N, F]`` and sorted label ids per sample.

    Example:
        >>> d = synthetic_multilabel(1000, 32, 100, labels_per_sample=3, seed=1)
        >>> d.x.shape, len(d.indices) / len(d)   # about 3 labels per sample
    """
    if num_samples < 0 or num_features < 1 or num_classes < 1:
        raise ValueError(
            f"need num_samples >= 0, num_features >= 1, num_classes >= 1, got "
            f"{num_samples}, {num_features}, {num_classes}"
        )
    if labels_per_sample < 1:
        raise ValueError(f"labels_per_sample must be >= 1, got {labels_per_sample}")
    if exponent < 0 or noise < 0:
        raise ValueError(f"exponent and noise must be >= 0, got {exponent}, {noise}")
    rng = numpy_rng(seed, "synthetic")
    # Shuffle which class id is popular, so id order says nothing about frequency.
    log_w = np.empty(num_classes)
    log_w[rng.permutation(num_classes)] = -exponent * np.log(np.arange(num_classes) + 1.0)
    counts = np.minimum(1 + rng.poisson(labels_per_sample - 1.0, size=num_samples), num_classes)
    # Weighted sampling without replacement: the k largest of log w + Gumbel noise, in chunks of rows
    # holding at most CHUNK_VALUES keys (a fixed row count would hold rows x p keys, gigabytes at large p). The
    # draws come out of one stream row after row, so the chunking does not change the data.
    kmax = int(counts.max()) if num_samples else 0
    chunk = max(1, min(2048, CHUNK_VALUES // num_classes))
    rows: list[np.ndarray] = []
    for lo in range(0, num_samples, chunk):
        keys = log_w + rng.gumbel(size=(min(chunk, num_samples - lo), num_classes))
        rows.extend(np.sort(top[: counts[lo + i]]) for i, top in enumerate(_largest_first(keys, kmax)))
    indptr = np.zeros(num_samples + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)
    proto = rng.standard_normal((num_classes, num_features))
    proto /= np.linalg.norm(proto, axis=1, keepdims=True)
    sample_of = np.repeat(np.arange(num_samples), counts)
    signal = np.zeros((num_samples, num_features))
    np.add.at(signal, sample_of, proto[indices])
    signal /= np.sqrt(np.maximum(counts, 1))[:, None]
    x = signal + noise * rng.standard_normal((num_samples, num_features)) / np.sqrt(num_features)
    return ClientData(
        torch.from_numpy(x.astype(np.float32)), torch.from_numpy(indptr), torch.from_numpy(indices), num_classes
    )
