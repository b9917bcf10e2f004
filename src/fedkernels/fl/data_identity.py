"""The identity of a run's data: a SHA-256 over every client's features and labels.

A checkpoint holds it in its run identity, so resuming on other data with the same shapes (another
dataset, another split or partition, other preprocessing) is refused instead of silently mixing two
runs. It costs one hashing pass over the data, once per server, and only when a checkpoint
is written or read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import torch

from .types import ClientData


def _update(h: hashlib._Hash, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(json.dumps([str(t.dtype), list(t.shape)]).encode())
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def data_fingerprint(clients: Sequence[ClientData]) -> str:
    """Hex SHA-256 over every client in order: features (dense values, or a sparse CSR's row
    pointer, column ids and values), label CSR (indptr, indices) and class count."""
    h = hashlib.sha256(f"fedkernels-data-v1 {len(clients)}".encode())
    for c in clients:
        x = c.x
        if x.layout == torch.sparse_csr:
            h.update(b"csr")
            for part in (x.crow_indices(), x.col_indices(), x.values()):
                _update(h, part)
            h.update(json.dumps(list(x.shape)).encode())
        else:
            _update(h, x)
        _update(h, c.indptr)
        _update(h, c.indices)
        h.update(str(int(c.num_classes)).encode())
    return h.hexdigest()
