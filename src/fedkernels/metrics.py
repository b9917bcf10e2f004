"""Ranking metrics for multi-label prediction (the Extreme Classification Repository's), and communication accounting.

Ground truth is CSR (``indptr [N+1]``, ``indices [nnz]``); predictions are sparse top-k class ids
``[N, k]`` (best first; ``-1`` marks an empty slot, e.g. after :func:`filter_predictions`, and never
hits). Samples without labels count as zero in every mean (they cannot be predicted right).

The definitions are the repository's (as its evaluation code, pyxclib's ``xc_metrics``, computes
them): P@k, nDCG@k (DCG over the ideal DCG of ``min(k, |y|)`` hits), recall@k (hits over ``|y|``),
and the propensity-scored PSP@k and PSnDCG@k of Jain et al. (2016), each normalised by the same
score of the best possible ranking (each sample's true labels by descending inverse propensity),
as a ratio of the means over samples. Propensities: :func:`inverse_propensity` with the per-dataset
A, B of :data:`PROPENSITY` (:func:`propensity_params`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch

from ._validate import INT64_MAX, as_csr, as_int64, check_int, check_label_csr

__all__ = [  # the functions (the PROPENSITY table is a module attribute)
    "check_propensity",
    "communication_summary",
    "filter_predictions",
    "inverse_propensity",
    "map_at_k",
    "map_at_r",
    "ndcg_at_k",
    "precision_at_k",
    "propensity_params",
    "psndcg_at_k",
    "psp_at_k",
    "ranking_metrics",
    "recall_at_k",
    "retrieval_map",
    "retrieval_map_at_k",
    "split_precision_at_k",
    "top1_accuracy",
]

# Jain et al. (2016)'s propensity model p_l = 1 / (1 + C (N_l + B)^-A) per dataset: (A, B, source).
# JAIN16: Jain, Prabhu, Varma, "Extreme Multi-label Loss Functions for Recommendation, Tagging,
# Ranking & Other Missing Label Applications", KDD 2016, Sec. 3 (A, B fitted on Wikipedia and Amazon
# metadata; 0.55, 1.5 for the datasets without such data). NAPKINXC: napkinXC's
# experiments/calculate_Jain_et_al_inv_ps.py (wikiLSHTC, WikipediaLarge-500K: 0.5/0.4; amazon,
# amazon-3M: 0.6/2.6; every other dataset 0.55/1.5). PYXCLIB: pyxclib's compute_inv_propesity
# (0.5/0.4 Wikipedia, 0.6/2.6 Amazon, 0.55/1.5 otherwise), the repository's evaluation code, as
# the LF-* papers' evaluation scripts apply it (LF-AmazonTitles: Amazon).
_JAIN16, _NAPKINXC, _PYXCLIB = "Jain et al. 2016 Sec. 3", "napkinXC calculate_Jain_et_al_inv_ps.py", "pyxclib"
PROPENSITY: dict[str, tuple[float, float, str]] = {
    "amazon-670k": (0.6, 2.6, f"{_JAIN16}; {_NAPKINXC}"),
    "amazon-3m": (0.6, 2.6, _NAPKINXC),
    "lf-amazontitles-131k": (0.6, 2.6, f"{_PYXCLIB} (Amazon)"),
    "lf-amazon-131k": (0.6, 2.6, f"{_PYXCLIB} (Amazon)"),
    "lf-amazontitles-1.3m": (0.6, 2.6, f"{_PYXCLIB} (Amazon)"),
    "wikilshtc-325k": (0.5, 0.4, f"{_JAIN16}; {_NAPKINXC}"),
    "wikipedialarge-500k": (0.5, 0.4, _NAPKINXC),
    "lf-wikiseealsotitles-320k": (0.5, 0.4, f"{_PYXCLIB} (Wikipedia)"),
    "lf-wikiseealso-320k": (0.5, 0.4, f"{_PYXCLIB} (Wikipedia)"),
    "lf-wikititles-500k": (0.5, 0.4, f"{_PYXCLIB} (Wikipedia)"),
    # Wiki10's labels are Delicious tags of Wikipedia pages, AmazonCat's product categories: neither
    # is among the fitted datasets, and napkinXC's script gives both the default.
    "wiki10-31k": (0.55, 1.5, _NAPKINXC),
    "amazoncat-13k": (0.55, 1.5, _NAPKINXC),
    "eurlex-4k": (0.55, 1.5, f"{_JAIN16} (default); {_NAPKINXC}"),
}
DEFAULT_PROPENSITY = (0.55, 1.5)


def propensity_params(dataset: str | None) -> tuple[float, float]:
    """``(A, B)`` of Jain et al.'s propensity model for a dataset name (any case; a path's last part
    counts), from :data:`PROPENSITY`; ``(0.55, 1.5)`` for any other dataset, as the papers use."""
    if dataset is None:
        return DEFAULT_PROPENSITY
    name = str(dataset).rstrip("/").rsplit("/", 1)[-1].lower()
    a, b, _ = PROPENSITY.get(name, (*DEFAULT_PROPENSITY, ""))
    return a, b


class _RoundLike(Protocol):
    """What communication_summary reads of a round record (``fedkernels.fl.RoundRecord`` has it):
    a protocol, so this module needs nothing from the loop above it."""

    round: int
    bytes_up: int
    bytes_down: int
    metrics: dict[str, float]


def _inputs(topk: object, indptr: object, indices: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """int64 tensors of the predictions and the CSR truth (numpy and int32 input converted once),
    checked: ``indptr`` of ``N + 1`` entries for the N rows of ``topk``, from 0 to nnz and never
    decreasing; label ids ``>= 0``; predicted ids ``>= -1`` and none repeated within a row (``-1`` may
    repeat); and every id small enough to be compared (below ``(2**63 - 1) // N``: a label of -1, a
    prediction near 2**62 or a repeated prediction gave false hits). Each is a ValueError naming the
    argument; a label repeated within a row is refused by :func:`_hits`, which sorts the labels anyway."""
    topk_t = as_int64("topk", topk)
    if topk_t.dim() != 2:
        raise ValueError(f"topk must be [N, k], got shape {tuple(topk_t.shape)}")
    indptr_t, indices_t = as_csr(indptr, indices, num_rows=topk_t.shape[0])
    check_label_csr(indptr_t, indices_t)
    if topk_t.numel() and int(topk_t.min()) < -1:
        raise ValueError(f"topk ids must be >= 0 (or -1 for an empty slot), got {int(topk_t.min())}")
    n = topk_t.shape[0]
    bound = INT64_MAX // max(1, n + 1)  # _hits keys rows as row * (largest id + 1) + id
    for name, t in (("topk", topk_t), ("indices", indices_t)):
        if t.numel() and int(t.max()) >= bound:
            raise ValueError(f"{name} holds class id {int(t.max())}: with {n} samples ids must be below {bound}")
    # a repeated prediction or label counted twice (P@k above 1 on [3, 3] with label 3)
    if topk_t.shape[1] > 1:
        s = torch.sort(topk_t, dim=1).values
        if bool(((s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)).any()):
            raise ValueError("topk repeats a class id within a row (-1, an empty slot, may repeat)")
    return topk_t, indptr_t, indices_t  # (a label repeated within a row: _hits, which sorts them anyway)


def _hits(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """bool ``[N, k]``: whether each predicted id is a true label of its sample (``-1``: never)."""
    n, k = topk.shape
    if topk.numel() and int(topk.min()) < -1:
        raise ValueError("topk ids must be >= 0 (or -1 for an empty slot)")
    rows = torch.repeat_interleave(torch.arange(n, device=indptr.device), indptr.diff())
    # A sample's true labels as sorted keys row * P + label, searched for every prediction.
    top = int(topk.max()) if topk.numel() else 0
    p = int(max(int(indices.max()) if indices.numel() else 0, top) + 1)
    keys = torch.sort(rows * p + indices).values
    if keys.numel() > 1 and bool((keys[1:] == keys[:-1]).any()):
        raise ValueError("indices repeats a label id within a row")
    if n == 0 or k == 0:
        return torch.zeros(n, k, dtype=torch.bool, device=topk.device)
    q = (torch.arange(n, device=topk.device).unsqueeze(1) * p + topk).reshape(-1)
    pos = torch.searchsorted(keys, q).clamp_max(max(keys.numel() - 1, 0))
    found = keys[pos] == q if keys.numel() else torch.zeros_like(q, dtype=torch.bool)
    return found.view(n, k) & (topk >= 0)


def precision_at_k(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, k: int) -> float:
    """P@k = mean over samples of |top-k ∩ labels| / k.

    Args:
        topk: int64 ``[N, >=k]`` predicted class ids, best first.
        indptr: int64 ``[N + 1]``, CSR row pointer of the true label sets.
        indices: int64 ``[nnz]``, the true class ids.
    """
    topk, indptr, indices = _inputs(topk, indptr, indices)
    if k < 1 or topk.shape[1] < k:
        raise ValueError(f"k must be in [1, {topk.shape[1]}], got {k}")
    if topk.shape[0] == 0:
        return 0.0
    return float(_hits(topk[:, :k], indptr, indices).sum(1).float().mean() / k)


def ndcg_at_k(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, k: int) -> float:
    """nDCG@k with binary relevance: DCG@k / IDCG@k where IDCG uses min(k, |labels|) hits."""
    topk, indptr, indices = _inputs(topk, indptr, indices)
    if k < 1 or topk.shape[1] < k:
        raise ValueError(f"k must be in [1, {topk.shape[1]}], got {k}")
    n = topk.shape[0]
    if n == 0:
        return 0.0
    disc = 1.0 / torch.log2(torch.arange(k, dtype=torch.float64, device=topk.device) + 2.0)
    dcg = (_hits(topk[:, :k], indptr, indices).double() * disc).sum(1)
    nlab = indptr.diff().clamp_max(k)
    idcg = torch.cumsum(disc, 0)[(nlab - 1).clamp_min(0)] * (nlab > 0)
    return float(torch.where(idcg > 0, dcg / idcg.clamp_min(1e-30), torch.zeros_like(dcg)).mean())


def _check_k(topk: torch.Tensor, k: int) -> None:
    if k < 1 or topk.shape[1] < k:
        raise ValueError(f"k must be in [1, {topk.shape[1]}], got {k}")


def top1_accuracy(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor) -> float:
    """Share of samples whose best-ranked class is one of their labels (equal to P@1)."""
    topk, indptr, indices = _inputs(topk, indptr, indices)
    return precision_at_k(topk, indptr, indices, 1)


def inverse_propensity(label_counts: torch.Tensor, num_samples: int, a: float = 0.55, b: float = 1.5) -> torch.Tensor:
    """Inverse propensities ``1 / p_l`` of Jain et al. (2016).

    ``p_l = 1 / (1 + C exp(-A log(N_l + B)))`` with ``C = (log N - 1) (B + 1)^A``, where ``N_l`` is
    the training count of label l and N the number of training samples.

    Args:
        label_counts: ``[L]`` training samples per label (finite, >= 0).
        num_samples: N (>= 1).
        a: the model's A, finite and > 0 (the fitted values lie in [0.5, 0.6]).
        b: the model's B, finite and > 0 (the fitted values lie in [0.4, 2.6]; ``B <= 0`` puts the log
            of a non-positive number in every unseen label's weight).

    Returns:
        float64 ``[L]``, every value finite and >= 1 (for N >= 3).

    Raises:
        ValueError: naming ``a``, ``b``, ``num_samples`` or ``label_counts``, or naming A and B when
            they make a weight overflow.
    """
    check_propensity(a, b)
    num_samples = check_int("num_samples", num_samples, 1)
    n_l = torch.as_tensor(label_counts, dtype=torch.float64)
    if n_l.numel() and not bool(torch.isfinite(n_l).all() and (n_l >= 0).all()):
        raise ValueError("label_counts must be finite and >= 0")
    # C exp(-A log(N_l + B)) in log space: (B + 1)^A alone overflows for a large B that check_propensity
    # accepts (its ratio to (N_l + B)^A is what stays bounded)
    log_ratio = a * (math.log1p(b) - torch.log(n_l + b))
    return 1.0 + (math.log(num_samples) - 1.0) * torch.exp(log_ratio)


MAX_INV_PROPENSITY = 1e250
"""The largest inverse propensity the propensity-scored metrics take: their sums over up to 2**63
samples at 64 cut-offs stay finite (float64 holds 1.8e308)."""


def check_propensity(a: object, b: object) -> None:
    """``A`` and ``B`` of Jain et al.'s model: finite numbers > 0, whose largest inverse propensity
    (a label never seen, among 2**63 - 1 samples) stays within :data:`MAX_INV_PROPENSITY`.

    Raises:
        ValueError: naming A and B and what they must be.
    """
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in (a, b))
    if not ok:
        raise ValueError(f"A and B of the propensity model must be finite numbers > 0, got A={a!r}, B={b!r}")
    assert isinstance(a, (int, float)) and isinstance(b, (int, float))
    try:  # 1 + C (0 + B)^-A with C = (log N - 1) (B + 1)^A, at the largest N
        top = 1.0 + (math.log(INT64_MAX) - 1.0) * math.exp(a * (math.log1p(b) - math.log(b)))
    except OverflowError:
        top = math.inf
    if not top <= MAX_INV_PROPENSITY:
        raise ValueError(
            f"A={a!r}, B={b!r} give unseen labels an inverse propensity of {top:.3g}, above "
            f"{MAX_INV_PROPENSITY:.0e}: the propensity-scored metrics would overflow"
        )


def psp_at_k(
    topk: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    inv_propensity: torch.Tensor,
    k: int,
    normalize: bool = True,
) -> float:
    """Propensity-scored precision PSP@k (Jain et al. 2016).

    Unnormalised: the mean over samples of ``(1/k) sum_{l in top-k} y_l / p_l``. Normalised (the
    default, as the Extreme Classification Repository reports it): that mean divided by the same
    mean for the best possible top-k (each sample's k labels of largest ``1/p_l``), so 1.0 is perfect.

    Args:
        topk: int64 ``[N, >=k]`` predictions, best first.
        indptr: int64 ``[N + 1]``, CSR row pointer of the true label sets.
        indices: int64 ``[nnz]``, the true class ids.
        inv_propensity: ``[L]`` from :func:`inverse_propensity` (fitted on the training labels).
    """
    topk, indptr, indices = _inputs(topk, indptr, indices)
    _check_k(topk, k)
    n = topk.shape[0]
    if n == 0:
        return 0.0
    w = _weights(inv_propensity, topk, indices)
    gained = _weighted_hits(topk[:, :k], indptr, indices, w).sum() / (k * n)
    if not normalize:
        return float(gained)
    best = _ideal_weights(indptr, indices, w, k).sum() / (k * n)  # the best top-k's score
    return float(gained / best) if best > 0 else 0.0


def _weights(inv_propensity: object, topk: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """float64 ``[L]`` inverse propensities, every id of ``topk`` and ``indices`` in range."""
    w = torch.as_tensor(inv_propensity, dtype=torch.float64, device=topk.device)
    if w.dim() != 1:
        raise ValueError(f"inv_propensity must be 1-D [L], got shape {tuple(w.shape)}")
    if (indices.numel() and int(indices.max()) >= w.numel()) or (topk.numel() and int(topk.max()) >= w.numel()):
        raise ValueError(f"inv_propensity has {w.numel()} labels but an id is out of that range")
    if w.numel() and not bool(((w > 0) & (w <= MAX_INV_PROPENSITY)).all()):  # NaN fails both
        raise ValueError(f"inv_propensity must hold numbers in (0, {MAX_INV_PROPENSITY:.0e}] (NaN, inf, <= 0 refused)")
    return w


def _weighted_hits(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float64 ``[N, k]``: ``1/p_l`` where the prediction is a true label, else 0."""
    return _hits(topk, indptr, indices).double() * w[topk.clamp_min(0)]


def _ideal_weights(indptr: torch.Tensor, indices: torch.Tensor, w: torch.Tensor, k: int) -> torch.Tensor:
    """float64 ``[N, k]``: each sample's true labels' weights, largest first (the propensity-scored
    metrics' best ranking), zero-padded past its label count."""
    n = indptr.numel() - 1
    out = torch.zeros(n, k, dtype=torch.float64, device=indptr.device)
    if indices.numel() == 0 or k == 0:
        return out
    rows = torch.repeat_interleave(torch.arange(n, device=indptr.device), indptr.diff())
    wl = w[indices]
    order = torch.sort(wl, descending=True, stable=True).indices
    order = order[torch.sort(rows[order], stable=True).indices]  # by sample, weight descending within
    rank = torch.arange(indices.numel(), device=indices.device) - indptr[:-1][rows[order]]
    keep = rank < k
    out[rows[order][keep], rank[keep]] = wl[order][keep]
    return out


def _discounts(k: int) -> torch.Tensor:
    """``1 / log2(r + 1)`` for ranks r = 1 .. k (float64 ``[k]``)."""
    return 1.0 / torch.log2(torch.arange(k, dtype=torch.float64) + 2.0)


def _ideal_dcg(indptr: torch.Tensor, k: int) -> torch.Tensor:
    """float64 ``[N]``: the DCG of ``min(k, |y|)`` hits in the first ranks (0 without labels)."""
    nlab = indptr.diff().clamp_max(k)
    return torch.cumsum(_discounts(k), 0)[(nlab - 1).clamp_min(0)] * (nlab > 0)


def psndcg_at_k(
    topk: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    inv_propensity: torch.Tensor,
    k: int,
    normalize: bool = True,
) -> float:
    """Propensity-scored nDCG@k (Jain et al. 2016), as the Extreme Classification Repository reports it.

    Per sample ``PSDCG@k = sum_{r <= k} y_{l_r} / (p_{l_r} log2(r + 1))`` over the ranked predictions
    ``l_r``, divided by the ideal DCG of ``min(k, |y|)`` hits (nDCG's normaliser); the mean over
    samples. Normalised (the default): divided by the same mean for the best ranking (each sample's
    true labels by descending ``1/p_l``), so 1.0 is the best achievable.

    Args:
        topk: int64 ``[N, >=k]`` predictions, best first (``-1``: empty slot).
        indptr: int64 ``[N + 1]``, CSR row pointer of the true label sets.
        indices: int64 ``[nnz]``, the true class ids.
        inv_propensity: ``[L]`` from :func:`inverse_propensity` (fitted on the training labels).
        k: the cut-off.
        normalize: divide by the best ranking's score.
    """
    topk, indptr, indices = _inputs(topk, indptr, indices)
    _check_k(topk, k)
    n = topk.shape[0]
    if n == 0:
        return 0.0
    w = _weights(inv_propensity, topk, indices)
    idcg = _ideal_dcg(indptr, k)
    disc = _discounts(k)

    def mean_ndcg(gains: torch.Tensor) -> torch.Tensor:
        dcg = (gains * disc).sum(1)
        return torch.where(idcg > 0, dcg / idcg.clamp_min(1e-300), torch.zeros_like(dcg)).mean()

    got = mean_ndcg(_weighted_hits(topk[:, :k], indptr, indices, w))
    if not normalize:
        return float(got)
    best = mean_ndcg(_ideal_weights(indptr, indices, w, k))
    return float(got / best) if best > 0 else 0.0


def recall_at_k(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, k: int) -> float:
    """Recall@k: the mean over samples of ``|top-k ∩ y| / |y|`` (0 for a sample without labels).

    Args:
        topk: int64 ``[N, >=k]`` predicted class ids, best first.
        indptr: int64 ``[N + 1]``, CSR row pointer of the true label sets.
        indices: int64 ``[nnz]``, the true class ids.
        k: the cut-off.
    """
    topk, indptr, indices = _inputs(topk, indptr, indices)
    _check_k(topk, k)
    if topk.shape[0] == 0:
        return 0.0
    hits = _hits(topk[:, :k], indptr, indices).sum(1).double()
    return float((hits / indptr.diff().clamp_min(1).double()).mean())


def filter_predictions(
    topk: torch.Tensor, filter_indptr: torch.Tensor, filter_indices: torch.Tensor, k: int
) -> torch.Tensor:
    """The first k predictions of each row that its filter does not list (order kept; ``-1`` pads a
    row left with fewer than k).

    The LF-* datasets of the Extreme Classification Repository ship ``filter_labels_test.txt``:
    (sample, label) pairs, mostly a document and itself, removed from the ground truth and to be
    removed from the predictions before scoring, as every published LF-* number does. Predict
    ``k + max filtered per row`` classes, filter, then score the first k.

    Args:
        topk: int64 ``[N, K]`` predictions, best first.
        filter_indptr: int64 ``[N + 1]``, CSR row pointer of the filtered labels per sample.
        filter_indices: int64 ``[nnz]``, the filtered class ids.
        k: predictions kept per row (``<= K``).

    Returns:
        int64 ``[N, k]``.
    """
    topk, fp, fi = _inputs(topk, filter_indptr, filter_indices)
    if not 0 <= k <= topk.shape[1]:
        raise ValueError(f"k must be in [0, {topk.shape[1]}], got {k}")
    dropped = _hits(topk, fp, fi)
    # stable sort of kept-before-dropped puts the kept ids first, in their order
    order = torch.sort(dropped.to(torch.int8), dim=1, stable=True).indices
    out = torch.gather(topk, 1, order)[:, :k].clone()
    out[torch.gather(dropped, 1, order)[:, :k]] = -1
    return out


def split_precision_at_k(
    topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, frequent: torch.Tensor, k: int
) -> tuple[float, float]:
    """FedMLH's split of P@k into frequent and infrequent classes.

    ``P@k_freq`` counts only hits on classes in ``frequent``, ``P@k_infreq`` only the others, both
    divided by k and averaged over all samples, so ``P@k_freq + P@k_infreq == P@k``.

    Args:
        frequent: int64 class ids (e.g. :func:`fedkernels.data.frequent_classes` of the training labels).
    """
    topk, indptr, indices = _inputs(topk, indptr, indices)
    _check_k(topk, k)
    n = topk.shape[0]
    if n == 0:
        return 0.0, 0.0
    hits = _hits(topk[:, :k], indptr, indices)
    is_freq = torch.isin(topk[:, :k], torch.as_tensor(frequent, dtype=torch.int64, device=topk.device))
    return float((hits & is_freq).sum() / (k * n)), float((hits & ~is_freq).sum() / (k * n))


def map_at_k(topk: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, k: int) -> float:
    """Mean average precision of the top-k ranking: per sample
    ``AP@k = sum_{i<=k} hit_i * P@i / min(k, |labels|)`` (0 without labels), averaged over samples.
    With ``k = p`` (a full ranking) it is the usual MAP."""
    topk, indptr, indices = _inputs(topk, indptr, indices)
    _check_k(topk, k)
    n = topk.shape[0]
    if n == 0:
        return 0.0
    hits = _hits(topk[:, :k], indptr, indices).double()
    prec_at_i = torch.cumsum(hits, 1) / torch.arange(1, k + 1, dtype=torch.float64, device=hits.device)
    denom = indptr.diff().clamp_max(k).double()
    ap = torch.where(
        denom > 0,
        (hits * prec_at_i).sum(1) / denom.clamp_min(1),
        torch.zeros(n, dtype=torch.float64, device=hits.device),
    )
    return float(ap.mean())


SIM_VALUES = 1 << 22
"""Products :func:`map_at_r` holds at once (float64: 32 MiB)."""


def map_at_r(embeddings: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, block: int = 1024) -> float:
    """Retrieval MAP@R (Musgrave et al. 2020) of representations, for multi-label data.

    Each sample queries the others by cosine similarity; the relevant ones are those sharing at least
    one label with it, ``R`` of them; ``MAP@R = (1 / R) sum_{j <= R} P@j * rel_j`` over its top R
    (ties to the smaller index), averaged over the samples with ``R >= 1``.

    Args:
        embeddings: float ``[N, d]``.
        indptr: int64 ``[N + 1]``, the CSR row pointers of the samples' label sets.
        indices: int64 ``[nnz]``, their label ids.
        block: queries per block (memory ``block x N``).

    Returns:
        MAP@R in [0, 1] (0.0 when no sample has a relevant other sample).
    """
    return retrieval_map(embeddings, indptr, indices, (), block)["MAP@R"]


def retrieval_map_at_k(
    embeddings: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, k: int, block: int = 1024
) -> float:
    """Retrieval MAP@k with a fixed cutoff: :func:`map_at_r`'s queries, relevance and ranking, each
    query's average precision over its top ``k`` alone,
    ``AP@k = sum_{j <= k} P@j * rel_j / min(k, R)``, averaged over the samples with ``R >= 1``.

    The FedSS paper's "MAP@R with R = 10" is ``k = 10``. Unlike :func:`map_at_r`, whose cutoff is
    each query's own ``R`` (hundreds on data where a label is shared by many samples), it scores
    only the first ``k`` retrieved, as a user of the retrieval would see them.

    Args:
        embeddings: float ``[N, d]``.
        indptr: int64 ``[N + 1]``, the CSR row pointers of the samples' label sets.
        indices: int64 ``[nnz]``, their label ids.
        k: the cutoff, ``>= 1``.
        block: queries per block (memory ``block x N``).

    Returns:
        MAP@k in [0, 1] (0.0 when no sample has a relevant other sample).
    """
    return retrieval_map(embeddings, indptr, indices, (k,), block)[f"MAP@{k}"]


def retrieval_map(
    embeddings: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    ks: Sequence[int] = (),
    block: int = 1024,
) -> dict[str, float]:
    """:func:`map_at_r` and :func:`retrieval_map_at_k` for every cutoff in ``ks``, from one ranking
    of every query: ``{"MAP@R": ..., "MAP@<k>": ...}``.

    Args:
        embeddings: float ``[N, d]``.
        indptr: int64 ``[N + 1]``, the CSR row pointers of the samples' label sets.
        indices: int64 ``[nnz]``, their label ids.
        ks: fixed cutoffs, each ``>= 1``.
        block: queries per block (memory ``block x N``).

    Raises:
        ValueError: embeddings not 2-D, a cutoff below 1, or a bad label CSR.
    """
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be [N, d], got shape {tuple(embeddings.shape)}")
    ks = tuple(ks)
    for k in ks:
        check_int("k", k, 1)
    n = embeddings.shape[0]
    indptr, indices = as_csr(indptr, indices, num_rows=n)
    check_label_csr(indptr, indices)
    names = ["MAP@R", *(f"MAP@{k}" for k in ks)]
    if n < 2:
        return dict.fromkeys(names, 0.0)
    # columns for the distinct labels only: [N, nnz] at most, whatever ids the labels carry
    distinct, column = torch.unique(indices, return_inverse=True)
    y = torch.zeros(n, max(1, distinct.numel()))
    y[torch.repeat_interleave(torch.arange(n), indptr.diff()), column] = 1.0
    e = torch.nn.functional.normalize(embeddings.double(), dim=1)
    # Similarities as elementwise products summed over d, not a GEMM: a BLAS kernel may treat columns
    # differently (edge tiles), so two identical embeddings got cosines one ulp apart and the tie went
    # to the larger index. Memory: at most SIM_VALUES products per block.
    block = max(1, min(block, SIM_VALUES // max(1, n * e.shape[1])))
    totals, counted = dict.fromkeys(names, 0.0), 0
    ranks = torch.arange(1, n + 1, dtype=torch.float64)
    for start in range(0, n, block):
        q = torch.arange(start, min(n, start + block))
        rel = (y[q] @ y.T) > 0  # [b, N]
        rel[torch.arange(q.numel()), q] = False
        r = rel.sum(1)
        sim = (e[q, None, :] * e[None, :, :]).sum(-1)
        sim[torch.arange(q.numel()), q] = -torch.inf  # never retrieve itself
        order = torch.sort(-sim, dim=1, stable=True).indices
        hits = torch.gather(rel, 1, order).double()
        prec_hits = torch.cumsum(hits, 1) / ranks * hits
        keep = r > 0
        cutoffs = [("MAP@R", r, r)] + [(f"MAP@{k}", torch.full_like(r, k), r.clamp_max(k)) for k in ks]
        for name, cut, denom in cutoffs:
            ap = (prec_hits * (ranks[None, :] <= cut[:, None])).sum(1) / denom.clamp_min(1)
            totals[name] += float(ap[keep].sum())
        counted += int(keep.sum())
    return {name: (total / counted if counted else 0.0) for name, total in totals.items()}


def ranking_metrics(
    topk: torch.Tensor,
    indptr: torch.Tensor,
    indices: torch.Tensor,
    ks: tuple[int, ...] = (1, 3, 5),
    inv_propensity: torch.Tensor | None = None,
    frequent: torch.Tensor | None = None,
) -> dict[str, float]:
    """P@k, nDCG@k and R@k (recall) for every k in ``ks`` that the prediction width allows; with
    ``inv_propensity`` also PSP@k and PSnDCG@k (normalised), with ``frequent`` also
    ``P@k_freq``/``P@k_infreq``; and MAP over the prediction width (``MAP@<width>``)."""
    topk, indptr, indices = _inputs(topk, indptr, indices)
    out: dict[str, float] = {}
    for k in ks:
        if k <= topk.shape[1]:
            out[f"P@{k}"] = precision_at_k(topk, indptr, indices, k)
            out[f"nDCG@{k}"] = ndcg_at_k(topk, indptr, indices, k)
            out[f"R@{k}"] = recall_at_k(topk, indptr, indices, k)
            if inv_propensity is not None:
                out[f"PSP@{k}"] = psp_at_k(topk, indptr, indices, inv_propensity, k)
                out[f"PSnDCG@{k}"] = psndcg_at_k(topk, indptr, indices, inv_propensity, k)
            if frequent is not None:
                out[f"P@{k}_freq"], out[f"P@{k}_infreq"] = split_precision_at_k(topk, indptr, indices, frequent, k)
    if topk.shape[1] >= 1:
        out[f"MAP@{topk.shape[1]}"] = map_at_k(topk, indptr, indices, topk.shape[1])
    return out


def communication_summary(
    history: Sequence[_RoundLike], metric: str = "P@1", model_bytes: int | None = None, target: float | None = None
) -> dict:
    """Bytes per round and cumulative, and what they bought.

    Args:
        history: the run's :class:`~fedkernels.fl.RoundRecord` list (bytes from real serialisation).
        metric: the accuracy to track (rounds without it, i.e. not evaluated, are skipped).
        model_bytes: the model a client holds, reported as is.
        target: also report the first round (and cumulative bytes) reaching ``metric >= target``.

    Returns:
        dict with ``per_round`` (round, bytes_up, bytes_down, cum_up, cum_down, metric),
        ``total_up``, ``total_down``, ``best``, ``rounds_to_best`` (rounds run until the best value
        was first reached), ``bytes_to_best`` (cumulative up + down until then), ``model_bytes``,
        and with ``target``: ``rounds_to_target``/``bytes_to_target`` (``None`` if never reached).
    """
    per_round, up, down = [], 0, 0
    best, best_round, best_bytes = None, None, None
    hit_round, hit_bytes = None, None
    for i, rec in enumerate(history):
        up += rec.bytes_up
        down += rec.bytes_down
        value = rec.metrics.get(metric)
        per_round.append(
            {
                "round": rec.round,
                "bytes_up": rec.bytes_up,
                "bytes_down": rec.bytes_down,
                "cum_up": up,
                "cum_down": down,
                metric: value,
            }
        )
        if value is None:
            continue
        if best is None or value > best:
            best, best_round, best_bytes = value, i + 1, up + down
        if target is not None and hit_round is None and value >= target:
            hit_round, hit_bytes = i + 1, up + down
    out = {
        "metric": metric,
        "per_round": per_round,
        "total_up": up,
        "total_down": down,
        "best": best,
        "rounds_to_best": best_round,
        "bytes_to_best": best_bytes,
        "model_bytes": model_bytes,
    }
    if target is not None:
        out.update(target=target, rounds_to_target=hit_round, bytes_to_target=hit_bytes)
    return out
