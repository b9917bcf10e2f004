"""The record the data layer hands to the federated loop: one client's features and CSR labels."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sparse_rows import select_rows


@dataclass
class ClientData:
    """One client's local data: features (dense or sparse CSR) and multi-label targets in CSR.

    Attributes:
        x: float32 ``[n, F]`` features, dense or a ``torch.sparse_csr`` tensor (kept sparse by the
            loop: row gathers go through :func:`fedkernels.sparse_rows.select_rows`).
        indptr: int64 ``[n + 1]`` CSR row pointer of the label sets.
        indices: int64 ``[nnz]`` class ids in ``[0, num_classes)``.
        num_classes: p.
    """

    x: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    num_classes: int

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def rows(self, idx: torch.Tensor) -> ClientData:
        """The samples ``idx`` (int64 ``[m]``) as a new ClientData."""
        starts, ends = self.indptr[idx], self.indptr[idx + 1]
        lens = ends - starts
        indptr = torch.zeros(len(idx) + 1, dtype=torch.int64)
        indptr[1:] = torch.cumsum(lens, 0)
        if int(lens.sum()) == 0:
            indices = self.indices.new_empty(0)
        else:
            pos = torch.repeat_interleave(starts, lens) + (
                torch.arange(int(lens.sum())) - torch.repeat_interleave(indptr[:-1], lens)
            )
            indices = self.indices[pos]
        return ClientData(select_rows(self.x, idx), indptr, indices, self.num_classes)

    def dense_labels(self) -> torch.Tensor:
        """float32 ``[n, p]`` 0/1 label matrix (for small p and baselines)."""
        y = torch.zeros(len(self), self.num_classes)
        rows = torch.repeat_interleave(torch.arange(len(self)), self.indptr.diff())
        y[rows, self.indices] = 1.0
        return y
