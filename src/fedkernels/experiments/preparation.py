"""A run's preparation: the resolved run's dataset read from its located path and dealt to clients
(:func:`prepare_data`), with what the metrics need from the training labels. Nothing here looks a
dataset up: the path is the one :func:`~fedkernels.experiments.resolve.resolve_run` located.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..data import (
    Dataset,
    dirichlet_partition,
    dirichlet_sample_partition,
    fedmlh_partition,
    frequent_classes,
    iid_partition,
    label_counts,
    load_dataset,
    load_xc_dataset,
    make_clients,
    one_label_per_client,
    primary_label_partition,
    split_statistics,
)
from ..fl.types import ClientData
from ..metrics import inverse_propensity, propensity_params
from ..seeding import numpy_rng
from .configuration import ExperimentConfig
from .resolve import ResolvedRun, as_resolved


@dataclass
class PreparedData:
    """The dataset dealt to clients, plus what the metrics need from the training labels.

    ``held_out`` (with ``client_test_fraction``): each client's own test rows, kept out of ``clients``;
    ``split``: :func:`~fedkernels.data.split_statistics` of the partition (before any hold-out)."""

    dataset: Dataset
    clients: list[ClientData]
    test: ClientData
    inv_propensity: torch.Tensor
    frequent: torch.Tensor
    held_out: list[ClientData] | None = None
    split: dict[str, float] = field(default_factory=dict)
    test_filter: tuple[torch.Tensor, torch.Tensor] | None = None  # the LF-* filter over self.test's rows


def auto_feature_dim(message: str, cap: int = 1 << 14) -> int | None:
    """The hashed feature width for a dataset the loader refused to densify (its ``ValueError``
    ``message`` names ``N x F``): the largest power of two up to ``cap`` keeping ``N x width`` within
    the loader's dense bound. ``None`` if ``message`` is not that refusal."""
    from ..data.datasets import dense_width

    m = re.search(r"would be (\d+) x (\d+) = \d+ dense elements", message)
    if m is None or "feature_dim=" not in message:
        return None
    return dense_width(int(m.group(1)), cap)


def _load(cfg: ExperimentConfig, feature_dim: int | None) -> Dataset:
    """The dataset of a resolved config: synthetic, or the located path read as it is (never looked up)."""
    if cfg.dataset == "synthetic":
        return load_dataset("synthetic", seed=cfg.seed, test_fraction=cfg.test_fraction, **cfg.synthetic)
    return load_xc_dataset(
        Path(cfg.dataset), feature_dim, cfg.seed, cfg.test_fraction, l2_normalize=cfg.l2_normalize, sparse=cfg.sparse
    )


def prepare_data(run: ResolvedRun | ExperimentConfig) -> PreparedData:
    """Load the run's dataset from its located path (or make the synthetic one) and partition its
    training part as the config says.

    Args:
        run: the resolved run (:func:`~fedkernels.experiments.resolve.resolve_run`); an
            :class:`ExperimentConfig` is resolved here first (the Python API).
    """
    cfg = as_resolved(run).config
    try:
        ds = _load(cfg, cfg.feature_dim)
    except ValueError as e:
        dim = auto_feature_dim(str(e)) if cfg.feature_dim is None else None
        if dim is None:
            raise
        print(f"note: {e}; hashing the features to {dim} columns (set --feature-dim to choose)", flush=True)
        ds = _load(cfg, dim)
        ds.notes["feature_dim"] = f"{dim} (hashed automatically: too many features to keep dense)"
    tr, p = ds.train, ds.num_classes
    num_frequent = cfg.num_frequent if cfg.num_frequent is not None else max(1, p // 10)
    if cfg.partition in ("fedmlh", "fedmlh_single"):
        single = cfg.partition == "fedmlh_single"
        shards = fedmlh_partition(tr.indptr, tr.indices, p, cfg.clients, num_frequent, cfg.seed, single)
    elif cfg.partition == "dirichlet":
        shards = dirichlet_partition(tr.indptr, tr.indices, p, cfg.clients, cfg.beta, cfg.seed)
    elif cfg.partition == "dirichlet_sample":
        shards = dirichlet_sample_partition(
            tr.indptr, tr.indices, p, cfg.clients, cfg.beta, cfg.sample_fraction, cfg.seed
        )
    elif cfg.partition == "primary_label":
        shards = primary_label_partition(tr.indptr, tr.indices, p, cfg.client_size, cfg.seed)
    elif cfg.partition == "iid":
        shards = iid_partition(tr.indptr, tr.indices, cfg.clients, cfg.seed)
    else:
        shards = one_label_per_client(tr.indptr, tr.indices, p)
    test, test_filter = ds.test, ds.test_filter
    if cfg.max_test is not None and len(test) > cfg.max_test:
        test = test.rows(torch.arange(cfg.max_test))
        if test_filter is not None:  # the first max_test rows of the filter's CSR
            fp, fi = test_filter
            test_filter = (fp[: cfg.max_test + 1], fi[: int(fp[cfg.max_test])])
    counts = torch.from_numpy(label_counts(tr.indptr, tr.indices, p))
    clients, held_out = make_clients(tr.x, shards, p), None
    if cfg.client_test_fraction > 0:
        clients, held_out = hold_out_per_client(clients, cfg.client_test_fraction, cfg.seed)
    a, b = cfg.propensity if cfg.propensity is not None else propensity_params(cfg.dataset)
    ds.notes["propensity"] = {"A": a, "B": b, "from": "config" if cfg.propensity is not None else "dataset table"}
    return PreparedData(
        ds,
        clients,
        test,
        inverse_propensity(counts, max(len(tr), 3), a, b),
        torch.from_numpy(frequent_classes(tr.indptr, tr.indices, p, num_frequent)),
        held_out,
        split_statistics(shards, p),
        test_filter,
    )


def hold_out_per_client(
    clients: list[ClientData], fraction: float, seed: int
) -> tuple[list[ClientData], list[ClientData]]:
    """Each client's rows split by a seeded permutation into its training part and its own test part
    (``round(fraction * n)`` rows, at least one when it has two or more)."""
    train, held = [], []
    for c, data in enumerate(clients):
        n = len(data)
        perm = torch.from_numpy(numpy_rng(seed, "client-test", c).permutation(n))
        k = min(n - 1, max(1, round(fraction * n))) if n >= 2 else 0
        held.append(data.rows(torch.sort(perm[:k]).values))
        train.append(data.rows(torch.sort(perm[k:]).values))
    return train, held


def concat_clients(clients: list[ClientData]) -> ClientData:
    """The clients' rows stacked into one :class:`ClientData` (dense features)."""
    xs = [c.x.to_dense() if c.x.layout == torch.sparse_csr else c.x for c in clients]
    indptr = [torch.zeros(1, dtype=torch.int64)]
    base = 0
    for c in clients:
        indptr.append(c.indptr[1:] + base)
        base += int(c.indptr[-1])
    return ClientData(torch.cat(xs), torch.cat(indptr), torch.cat([c.indices for c in clients]), clients[0].num_classes)
