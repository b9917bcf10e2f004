"""Sketching ops for FedMLH: label hashing, bucket merging, count sketches (DESIGN.md §3)."""

from __future__ import annotations

import torch

from .. import _C  # noqa: F401  (registers the schemas)


def label_hash(indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Hash multi-label targets into R tables of B buckets.

    ``z[j, n, table[l, j]] = 1`` for every label ``l`` of sample ``n`` (a bucket is 1 when any of
    the sample's labels hashes into it).

    Args:
        indptr: int64 ``[N + 1]``, CSR row pointer of the label sets.
        indices: int64 ``[nnz]``, class ids in ``[0, p)``.
        table: int32 ``[p, R]``, buckets per class (``HashFamily.table(p)``).
        num_buckets: B.

    Returns:
        uint8 ``[R, N, B]``.

    Example:
        >>> hf = HashFamily(2, 8, seed=0)
        >>> z = label_hash(torch.tensor([0, 2]), torch.tensor([1, 5]), hf.table(10), 8)  # [2, 1, 8]
    """
    return torch.ops.fedkernels.label_hash(indptr, indices, table, num_buckets)


@torch.library.register_fake("fedkernels::label_hash")
def _label_hash_fake(indptr, indices, table, num_buckets):
    n = indptr.shape[0] - 1
    return table.new_empty((table.shape[1], n, num_buckets), dtype=torch.uint8)

