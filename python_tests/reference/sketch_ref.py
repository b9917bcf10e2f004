"""Reference sketching ops: obvious loops over samples, tables and labels."""

from __future__ import annotations

import torch


def label_hash(indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor, num_buckets: int) -> torch.Tensor:
    n, r = indptr.numel() - 1, table.shape[1]
    z = torch.zeros(r, n, num_buckets, dtype=torch.uint8)
    for i in range(n):
        for pos in range(int(indptr[i]), int(indptr[i + 1])):
            label = int(indices[pos])
            for j in range(r):
                z[j, i, int(table[label, j])] = 1
    return z
