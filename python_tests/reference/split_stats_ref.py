"""The slow, obvious split statistics: dense per-client label histograms and every client pair."""

from __future__ import annotations

import numpy as np


def mean_pairwise_tv_ref(label_lists: list[np.ndarray], num_classes: int) -> float:
    """Mean over pairs of clients with labels of 0.5 * sum_c |q_i(c) - q_j(c)| (q: normalised counts)."""
    hist = [np.bincount(np.asarray(ix, np.int64), minlength=num_classes).astype(np.float64) for ix in label_lists]
    q = [h / h.sum() for h in hist if h.sum() > 0]
    tv = [0.5 * np.abs(q[i] - q[j]).sum() for i in range(len(q)) for j in range(i + 1, len(q))]
    return float(np.mean(tv)) if tv else 0.0
