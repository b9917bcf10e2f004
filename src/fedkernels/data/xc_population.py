"""A synthetic extreme-classification population of many small clients, written straight into a store.

For scaling runs: 10^3 to 10^5 clients (and more) at p = 10^5 labels, generated in blocks of
:data:`BLOCK` clients, each block from its own seeded stream, each written to a
:class:`~fedkernels.data.client_store.ClientStoreWriter` as soon as it is made, so the population is
never in memory (one block is) and any block is the same whatever the population's size.

The model (all of it deterministic in ``seed``):

- **Power-law labels.** Class ``c`` has weight ``w_c ∝ (rank_c + 1) ** -exponent`` (ranks a seeded
  permutation of the ids), so a few head labels are common and most are rare.
- **Clients hold a few classes each.** Client k draws ``classes_per_client`` classes from ``w``.
  With ``one_label`` every example of client k is labelled with its first class alone (the FedAwS /
  FedALC setting: the clients' classes are then power-law over the population). Otherwise an example
  has ``1 + Poisson(labels_per_example - 1)`` label draws, each from the client's classes with
  probability ``client_share`` and from ``w`` otherwise, duplicates dropped.
- **Sizes.** Client k holds ``min_examples + Poisson(mean_examples - min_examples)`` examples
  (``min_examples = 0`` gives empty clients).
- **Sparse, predictive features.** Each class owns ``tokens_per_class`` signature tokens out of
  ``num_features``; an example's ``features_per_example`` token draws are half from its first label's
  signature and half uniform; duplicates dropped, values ``1 / sqrt(nnz)`` (unit L2 rows), float32 CSR.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..seeding import numpy_rng
from .client_store import ClientStoreWriter

BLOCK = 1024
"""Clients per generated block (the block index seeds its stream)."""


@dataclass(frozen=True)
class PopulationSpec:
    """Parameters of :func:`write_xc_population` (the module docstring gives the model)."""

    num_clients: int = 10_000
    num_classes: int = 100_000
    num_features: int = 1 << 14
    mean_examples: float = 8.0
    min_examples: int = 1
    classes_per_client: int = 3
    one_label: bool = False
    labels_per_example: float = 2.0
    client_share: float = 0.8
    features_per_example: int = 16
    tokens_per_class: int = 8
    exponent: float = 1.0
    seed: int = 0

    def validate(self) -> None:
        """``ValueError`` naming the first bad field."""
        ints = {
            "num_clients": (self.num_clients, 1),
            "num_classes": (self.num_classes, 1),
            "num_features": (self.num_features, 1),
            "min_examples": (self.min_examples, 0),
            "classes_per_client": (self.classes_per_client, 1),
            "features_per_example": (self.features_per_example, 1),
            "tokens_per_class": (self.tokens_per_class, 1),
        }
        for name, (v, lo) in ints.items():
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if not self.min_examples <= self.mean_examples <= 1e6:
            raise ValueError(f"mean_examples must lie in [min_examples, 1e6], got {self.mean_examples}")
        if not 1.0 <= self.labels_per_example <= 1000:
            raise ValueError(f"labels_per_example must lie in [1, 1000], got {self.labels_per_example}")
        if not 0.0 <= self.client_share <= 1.0:
            raise ValueError(f"client_share must lie in [0, 1], got {self.client_share}")
        if not 0.0 <= self.exponent <= 10.0:
            raise ValueError(f"exponent must lie in [0, 10], got {self.exponent}")


def class_weights(spec: PopulationSpec) -> np.ndarray:
    """float64 ``[p]``: each class's probability under the power law (ranks a seeded permutation)."""
    ranks = numpy_rng(spec.seed, "population", "ranks").permutation(spec.num_classes)
    w = (ranks + 1.0) ** -spec.exponent
    return w / w.sum()


def _draw(rng: np.random.Generator, cdf: np.ndarray, n: int) -> np.ndarray:
    # inverse-CDF draws; the clip keeps a final cdf below 1.0 by rounding inside [0, p)
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1).astype(np.int64)


def _dedupe(rows: np.ndarray, ids: np.ndarray, width: int, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (indptr, sorted ids) of the distinct (row, id) pairs."""
    key = np.sort(rows * np.int64(width) + ids)  # a sort then a neighbour test: faster than np.unique here
    key = key[np.concatenate([[True], key[1:] != key[:-1]])] if len(key) else key
    r, ids = np.divmod(key, np.int64(width))
    indptr = np.zeros(num_rows + 1, np.int64)
    np.cumsum(np.bincount(r, minlength=num_rows), out=indptr[1:])
    return indptr, ids


def population_block(
    spec: PopulationSpec, block: int, cdf: np.ndarray
) -> tuple[np.ndarray, tuple, np.ndarray, np.ndarray]:
    """Block ``block``'s clients as :meth:`ClientStoreWriter.append_block` takes them: ``(rows [B],
    (crow, col int64, values float32), label indptr, label ids)``; ``cdf`` is ``cumsum(class_weights)``."""
    first = block * BLOCK
    B = min(BLOCK, spec.num_clients - first)
    rng = numpy_rng(spec.seed, "population", "block", block)
    rows = spec.min_examples + rng.poisson(spec.mean_examples - spec.min_examples, B).astype(np.int64)
    R = int(rows.sum())
    row_client = np.repeat(np.arange(B), rows)
    owned = _draw(rng, cdf, B * spec.classes_per_client).reshape(B, spec.classes_per_client)
    if spec.one_label:
        y_indptr, y = np.arange(R + 1, dtype=np.int64), owned[row_client, 0]
    else:
        draws = 1 + rng.poisson(spec.labels_per_example - 1, R)
        row_of = np.repeat(np.arange(R), draws)
        T = len(row_of)
        mine = owned[row_client[row_of], rng.integers(0, spec.classes_per_client, T)]
        labels = np.where(rng.random(T) < spec.client_share, mine, _draw(rng, cdf, T))
        y_indptr, y = _dedupe(row_of, labels, spec.num_classes, R)
    # features: half the draws from the first label's signature tokens, half uniform
    m = spec.features_per_example
    row_of = np.repeat(np.arange(R), m)
    head = y[y_indptr[:-1]] if R else np.zeros(0, np.int64)
    slot = rng.integers(0, spec.tokens_per_class, R * m)
    # a class's j-th token: a fixed odd-multiplier hash of (class, j), the same in every block
    sig = (head[row_of] * np.int64(0x9E3779B1) + slot * np.int64(0x85EBCA77) + spec.seed) % spec.num_features
    tokens = np.where(np.arange(R * m) % 2 == 0, sig, rng.integers(0, spec.num_features, R * m))
    crow, col = _dedupe(row_of, tokens, spec.num_features, R)
    nnz = np.diff(crow)
    values = np.repeat((1.0 / np.sqrt(np.maximum(nnz, 1))).astype(np.float32), nnz)
    return rows, (crow, col, values), y_indptr, y


def write_xc_population(path: str | Path, spec: PopulationSpec) -> None:
    """Generate ``spec``'s population into a new store at ``path``, one block of :data:`BLOCK` clients
    at a time (open it with :class:`~fedkernels.data.client_store.ClientStore`)."""
    spec.validate()
    cdf = np.cumsum(class_weights(spec))
    with ClientStoreWriter(path, spec.num_clients, spec.num_features, spec.num_classes) as w:
        for b in range(-(-spec.num_clients // BLOCK)):
            rows, x, y_indptr, y = population_block(spec, b, cdf)
            w.append_block(rows, x, y_indptr, y)
