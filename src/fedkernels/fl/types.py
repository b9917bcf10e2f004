"""Plain data records of the federated loop."""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass
class TrainConfig:
    """Local training: E epochs of minibatch SGD (or Adam) at a learning rate."""

    epochs: int = 1
    batch_size: int = 64
    lr: float = 0.1
    optimizer: str = "sgd"  # "sgd" | "adam"
    weight_decay: float = 0.0


@dataclass
class ClientResult:
    """What the server receives from one client in one round (the payload already decoded and checked)."""

    client_id: int
    payload: dict[str, torch.Tensor]
    num_examples: int
    bytes_up: int


@dataclass
class RoundRecord:
    """One round's accounting and evaluation. ``skipped`` says why the update was skipped (e.g. every
    successful client held 0 examples), empty when it was applied or no client succeeded."""

    round: int
    clients: list[int]
    failed: list[tuple[int, str]]
    bytes_down: int
    bytes_up: int
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: str = ""
