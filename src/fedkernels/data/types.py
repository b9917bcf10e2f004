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

    @property
    def device(self) -> torch.device:
        """Where the features live (labels live there too once :meth:`to` moved them)."""
        return self.x.device

    def to(self, device: torch.device | str, non_blocking: bool = False) -> ClientData:
        """This data on ``device`` (``self`` when it is there already). From pinned host memory
        (:meth:`pin_memory`) the copies to a GPU are asynchronous with ``non_blocking=True``."""
        device = torch.device(device)
        if self.x.device == device and self.indptr.device == device and self.indices.device == device:
            return self
        x, indptr, indices = (t.to(device, non_blocking=non_blocking) for t in (self.x, self.indptr, self.indices))
        return ClientData(x, indptr, indices, self.num_classes)

    def pin_memory(self) -> ClientData:
        """This host data in page-locked memory, so copies to a GPU can overlap compute (a no-op
        without CUDA, and for data that is not on the CPU)."""
        if not torch.cuda.is_available() or self.x.device.type != "cpu":
            return self
        return ClientData(self.x.pin_memory(), self.indptr.pin_memory(), self.indices.pin_memory(), self.num_classes)

    def rows(self, idx: torch.Tensor) -> ClientData:
        """The samples ``idx`` (int64 ``[m]``, on any device) as a new ClientData."""
        idx = idx.to(self.indptr.device)
        starts, ends = self.indptr[idx], self.indptr[idx + 1]
        lens = ends - starts
        indptr = torch.zeros(len(idx) + 1, dtype=torch.int64, device=self.indptr.device)
        indptr[1:] = torch.cumsum(lens, 0)
        if int(lens.sum()) == 0:
            indices = self.indices.new_empty(0)
        else:
            pos = torch.repeat_interleave(starts, lens) + (
                torch.arange(int(lens.sum()), device=self.indptr.device) - torch.repeat_interleave(indptr[:-1], lens)
            )
            indices = self.indices[pos]
        return ClientData(select_rows(self.x, idx), indptr, indices, self.num_classes)

    def dense_labels(self) -> torch.Tensor:
        """float32 ``[n, p]`` 0/1 label matrix (for small p and baselines)."""
        y = torch.zeros(len(self), self.num_classes, device=self.x.device)
        rows = torch.repeat_interleave(torch.arange(len(self), device=self.indptr.device), self.indptr.diff())
        y[rows, self.indices] = 1.0
        return y
