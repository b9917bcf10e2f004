"""Partitioners: how a dataset's samples are dealt to federated clients.

Labels are CSR (``indptr [N+1]``, ``indices [nnz]``). Each partitioner returns one :class:`Shard`
per client: which rows it holds and the labels of its copies (one-label-per-client keeps only the
client's label), so :func:`make_clients` can build the clients' :class:`~fedkernels.fl.ClientData`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..seeding import numpy_rng
from ..sparse_rows import select_rows
from .types import ClientData


@dataclass
class Shard:
    """One client's part of a dataset.

    Attributes:
        rows: int64 ``[m]`` sample ids into the full dataset, ascending.
        indptr, indices: int64 CSR ``[m+1]``, ``[nnz]``: the labels of the client's copies.
        classes: the classes this client owns (FedMLH split: its frequent classes; one label per
            client: its label), or ``None`` when the partition has no ownership.
    """

    rows: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    classes: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.rows.shape[0])


def _csr(indptr, indices) -> tuple[np.ndarray, np.ndarray]:
    ip = np.asarray(indptr.numpy() if isinstance(indptr, torch.Tensor) else indptr, dtype=np.int64)
    ix = np.asarray(indices.numpy() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64)
    if ip.ndim != 1 or ip.size < 1 or ip[0] != 0 or ip[-1] != ix.size or np.any(np.diff(ip) < 0):
        raise ValueError("indptr must be a non-decreasing CSR row pointer starting at 0 and ending at len(indices)")
    return ip, ix


def _check_clients(num_clients: int) -> None:
    if int(num_clients) < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")


def _full_shard(rows: np.ndarray, indptr: np.ndarray, indices: np.ndarray, classes=None) -> Shard:
    """A shard whose copies carry all their labels."""
    rows = np.asarray(rows, dtype=np.int64)
    lens = indptr[rows + 1] - indptr[rows]
    sub_ptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lens, out=sub_ptr[1:])
    sub_idx = np.concatenate([indices[indptr[r] : indptr[r + 1]] for r in rows]) if rows.size else np.zeros(0, np.int64)
    return Shard(rows, sub_ptr, sub_idx.astype(np.int64), classes)


def label_counts(indptr, indices, num_classes: int) -> np.ndarray:
    """Samples per class: int64 ``[num_classes]``."""
    _, ix = _csr(indptr, indices)
    if ix.size and (ix.min() < 0 or ix.max() >= num_classes):
        raise ValueError(f"indices must lie in [0, num_classes={num_classes})")
    return np.bincount(ix, minlength=num_classes).astype(np.int64)


def frequent_classes(indptr, indices, num_classes: int, top: int) -> np.ndarray:
    """The ``top`` most frequent classes (by sample count, ties to the smaller id; classes with no
    sample are never frequent), ascending by id: int64 ``[<= top]``."""
    if int(top) < 0:
        raise ValueError(f"top must be >= 0, got {top}")
    counts = label_counts(indptr, indices, num_classes)
    order = np.lexsort((np.arange(num_classes), -counts))  # count descending, then id ascending
    chosen = order[: int(top)]
    return np.sort(chosen[counts[chosen] > 0]).astype(np.int64)


def iid_partition(indptr, indices, num_clients: int, seed: int = 0) -> list[Shard]:
    """Deal a seeded permutation of the samples into ``num_clients`` near-equal parts."""
    ip, ix = _csr(indptr, indices)
    _check_clients(num_clients)
    perm = numpy_rng(seed, "iid").permutation(ip.size - 1)
    return [_full_shard(np.sort(part), ip, ix) for part in np.array_split(perm, num_clients)]


def fedmlh_partition(
    indptr, indices, num_classes: int, num_clients: int, num_frequent: int, seed: int = 0, single: bool = False
) -> list[Shard]:
    """FedMLH's non-iid split: clients hold disjoint sets of frequent classes.

    The ``num_frequent`` most frequent classes are shuffled and dealt round-robin to the clients
    (each owned by exactly one). A sample goes to every client owning one of its frequent classes
    (so a sample with several frequent classes is copied to several clients, with all its
    labels); a sample with no frequent class goes to one uniformly random client. With ``single``
    a sample goes only to the owner of its most frequent frequent class (ties to the smaller id):
    one copy per sample, and clients far apart in label distribution even where samples carry many
    frequent labels (Delicious: 6.6 copies and mean pairwise TV 0.12 without, 1 and 0.61 with).
    """
    ip, ix = _csr(indptr, indices)
    _check_clients(num_clients)
    rng = numpy_rng(seed, "fedmlh")
    freq = frequent_classes(ip, ix, num_classes, num_frequent)
    owner = np.full(num_classes, -1, dtype=np.int64)
    owner[rng.permutation(freq)] = np.arange(freq.size) % num_clients
    n = ip.size - 1
    fallback = rng.integers(0, num_clients, size=n)
    counts = label_counts(ip, ix, num_classes)
    members: list[list[int]] = [[] for _ in range(num_clients)]
    for r in range(n):
        labels = ix[ip[r] : ip[r + 1]]
        owned = np.unique(labels[owner[labels] >= 0])
        # single: the owner of its most frequent owned class (np.unique sorts: ties to the smaller id)
        owners = owner[owned[[int(np.argmax(counts[owned]))]]] if single and owned.size else np.unique(owner[owned])
        for c in owners if owners.size else [fallback[r]]:
            members[int(c)].append(r)
    return [
        _full_shard(np.asarray(m, dtype=np.int64), ip, ix, np.sort(freq[owner[freq] == c]))
        for c, m in enumerate(members)
    ]


def _primary_labels(ip: np.ndarray, ix: np.ndarray, num_classes: int) -> np.ndarray:
    """Each sample's most frequent label (ties to the smaller id), or -1 without labels."""
    counts = np.bincount(ix, minlength=num_classes)
    # rank 0 = most frequent class; a sample's primary label is its label of smallest rank.
    rank = np.empty(num_classes, dtype=np.int64)
    rank[np.lexsort((np.arange(num_classes), -counts))] = np.arange(num_classes)
    out = np.full(ip.size - 1, -1, dtype=np.int64)
    for r in range(ip.size - 1):
        labs = ix[ip[r] : ip[r + 1]]
        if labs.size:
            out[r] = labs[np.argmin(rank[labs])]
    return out


def dirichlet_partition(
    indptr,
    indices,
    num_classes: int,
    num_clients: int,
    beta: float,
    seed: int = 0,
    min_size: int = 1,
    max_tries: int = 100,
) -> list[Shard]:
    """Label skew: each sample goes to one client; the samples of each primary label (a sample's
    most frequent label) are split over clients in proportions drawn from Dirichlet(beta).

    Small ``beta`` concentrates each label on few clients; large ``beta`` approaches iid. Draws are
    repeated (seeded) until every client holds at least ``min_size`` samples.
    """
    ip, ix = _csr(indptr, indices)
    _check_clients(num_clients)
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    n = ip.size - 1
    if min_size * num_clients > n:
        raise ValueError(f"min_size * num_clients = {min_size * num_clients} exceeds the {n} samples")
    primary = _primary_labels(ip, ix, num_classes)
    groups = [np.flatnonzero(primary == c) for c in np.unique(primary)]
    rng = numpy_rng(seed, "dirichlet")
    for _ in range(max_tries):
        members: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for g in groups:
            q = rng.dirichlet(np.full(num_clients, float(beta)))
            cuts = (np.cumsum(q)[:-1] * g.size).astype(np.int64)
            for c, part in enumerate(np.split(rng.permutation(g), cuts)):
                members[c].append(part)
        rows = [np.sort(np.concatenate(m)) for m in members]
        if min(r.size for r in rows) >= min_size:
            return [_full_shard(r, ip, ix) for r in rows]
    raise ValueError(
        f"no Dirichlet(beta={beta}) draw in {max_tries} gave every client >= {min_size} samples; "
        "raise beta or lower num_clients"
    )


def dirichlet_sample_partition(
    indptr,
    indices,
    num_classes: int,
    num_clients: int,
    beta: float,
    fraction: float = 0.75,
    seed: int = 0,
) -> list[Shard]:
    """Label skew by sampling with replacement, as the partial-exchange authors' code deals data
    (FL4Health's ``DirichletLabelBasedSampler``): clients overlap, unlike :func:`dirichlet_partition`.

    Each client independently draws class shares ``q ~ Dirichlet(beta)`` over the primary-label groups
    (a sample's most frequent label; samples without labels form one more group), then takes
    ``ceil(q_g * n)`` samples of each group g, uniformly with replacement, where
    ``n = floor(fraction * N)``; the draws, in group order, are cut to the first n. So every client
    holds exactly n rows (repeats included), and a sample may sit with several clients or several
    times with one. Client c's draws come from its own stream (seed, c): a client's rows do not depend
    on how many clients there are.

    The labels come as CSR, ``indptr`` int64 ``[N + 1]`` and ``indices`` int64 ``[nnz]`` in ``[0, p)``.

    Args:
        num_classes: p.
        num_clients: how many clients to draw (>= 1).
        beta: the Dirichlet concentration (> 0).
        fraction: the share of N each client draws, in ``(0, 1]`` (the authors' config: 0.75).
        seed: the seed of every client's stream.

    Returns:
        one :class:`Shard` per client; its ``rows`` ascending with repeats.
    """
    ip, ix = _csr(indptr, indices)
    _check_clients(num_clients)
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    n_all = ip.size - 1
    n = int(fraction * n_all)
    if n < 1:
        raise ValueError(f"fraction * N = {fraction} * {n_all} leaves a client no sample")
    primary = _primary_labels(ip, ix, num_classes)
    groups = [np.flatnonzero(primary == g) for g in np.unique(primary)]
    shards = []
    for c in range(int(num_clients)):
        rng = numpy_rng(seed, "dirichlet-sample", c)
        q = rng.dirichlet(np.full(len(groups), float(beta)))
        take = [rng.integers(0, g.size, size=int(np.ceil(share * n))) for g, share in zip(groups, q, strict=True)]
        rows = np.concatenate([g[t] for g, t in zip(groups, take, strict=True)])[:n]
        shards.append(_full_shard(np.sort(rows), ip, ix))
    return shards


def primary_label_partition(indptr, indices, num_classes: int, client_size: int, seed: int = 0) -> list[Shard]:
    """Many small clients with few labels each (the FedSS paper's regime: each user holds a handful of
    classes): every sample goes to the group of its primary label (its most frequent label, ties to
    the smaller id), and each group is cut, in a seeded order, into clients of ``client_size``
    samples (the last one may be smaller). Copies keep all their labels; samples without labels are
    dropped. Clients come in label order, then chunk order."""
    ip, ix = _csr(indptr, indices)
    if int(client_size) < 1:
        raise ValueError(f"client_size must be >= 1, got {client_size}")
    primary = _primary_labels(ip, ix, num_classes)
    rng = numpy_rng(seed, "primary-label")
    shards = []
    for c in np.unique(primary[primary >= 0]):
        rows = rng.permutation(np.flatnonzero(primary == c))
        for start in range(0, rows.size, int(client_size)):
            shards.append(_full_shard(np.sort(rows[start : start + int(client_size)]), ip, ix))
    return shards


def one_label_per_client(indptr, indices, num_classes: int) -> list[Shard]:
    """One client per class that has samples (in class order): client ``c`` holds every sample
    labelled ``c``, and its copies carry only the label ``c``. Samples without labels are dropped."""
    ip, ix = _csr(indptr, indices)
    label_counts(ip, ix, num_classes)  # validates the id range
    rows_of = np.repeat(np.arange(ip.size - 1), np.diff(ip))
    order = np.lexsort((rows_of, ix))  # by class, then by row
    cls, rows_sorted = ix[order], rows_of[order]
    shards = []
    for c in np.unique(cls):
        lo, hi = np.searchsorted(cls, c, "left"), np.searchsorted(cls, c, "right")
        rows = np.unique(rows_sorted[lo:hi])
        shards.append(
            Shard(
                rows,
                np.arange(rows.size + 1, dtype=np.int64),
                np.full(rows.size, c, np.int64),
                np.asarray([c], dtype=np.int64),
            )
        )
    return shards


def split_statistics(shards: list[Shard], num_classes: int) -> dict[str, float]:
    """How non-iid a split is: ``copies_per_sample`` (client copies over distinct samples dealt; 1 for
    a partition, more when samples are copied to several clients) and ``mean_pairwise_tv``, the mean
    over client pairs of the total-variation distance ``0.5 * sum_c |q_i(c) - q_j(c)|`` between their
    label distributions (each client's label counts, normalised; 0 for identical distributions, 1 for
    disjoint label sets). Clients without labels are left out of the TV mean."""
    rows = np.concatenate([s.rows for s in shards]) if shards else np.zeros(0, np.int64)
    distinct = np.unique(rows).size
    # Sparse per-client label distributions: a dense [clients, p] histogram is clients * p entries (tens of
    # GB at p = 312330 with one client per label), and the pairwise loop O(clients^2 p).
    labels_per_client, cls_parts, q_parts = [], [], []
    for s in shards:
        cls, counts = np.unique(np.asarray(s.indices, dtype=np.int64), return_counts=True)
        labels_per_client.append(cls.size)
        if cls.size:
            cls_parts.append(cls)
            q_parts.append(counts / counts.sum())
    return {
        "clients": len(shards),
        "copies_per_sample": float(rows.size / distinct) if distinct else 0.0,
        "mean_pairwise_tv": _mean_pairwise_tv(cls_parts, q_parts),
        "mean_labels_per_client": float(np.mean(labels_per_client)) if shards else 0.0,
        "max_label_share_per_client": float(max(labels_per_client) / max(1, num_classes)) if shards else 0.0,
    }


def _mean_pairwise_tv(cls_parts: list[np.ndarray], q_parts: list[np.ndarray]) -> float:
    """Mean over client pairs of ``0.5 * sum_c |q_i(c) - q_j(c)| = 1 - sum_c min(q_i(c), q_j(c))``, from
    each client's sparse distribution (its class ids and shares). Per class, the shares of the clients
    holding it sorted ascending: the r-th smallest of n is the min of its pairs with the n - 1 - r larger
    ones; pairs where a client lacks the class add 0. Exact, O(nnz log nnz) instead of O(k^2 p)."""
    k = len(cls_parts)
    if k < 2:
        return 0.0
    cls, q = np.concatenate(cls_parts), np.concatenate(q_parts)
    order = np.lexsort((q, cls))
    cls, q = cls[order], q[order]
    starts = np.flatnonzero(np.r_[True, cls[1:] != cls[:-1]])
    sizes = np.diff(np.r_[starts, cls.size])
    rank = np.arange(cls.size) - np.repeat(starts, sizes)
    overlap = float(np.sum(q * (np.repeat(sizes, sizes) - 1 - rank)))
    return 1.0 - overlap / (k * (k - 1) / 2)


def make_clients(x: torch.Tensor, shards: list[Shard], num_classes: int) -> list[ClientData]:
    """Each shard as a :class:`~fedkernels.fl.ClientData` (features ``x [N, F]``, dense or sparse CSR,
    gathered by row in the same layout)."""
    return [
        ClientData(
            select_rows(x, torch.from_numpy(s.rows)),
            torch.from_numpy(s.indptr),
            torch.from_numpy(s.indices),
            num_classes,
        )
        for s in shards
    ]
