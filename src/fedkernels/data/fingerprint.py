"""The bytes of a run's data identity (``fedkernels.fl.data_identity``), fed from torch or numpy arrays.

One SHA-256 over every client in order. The same bytes come out whether a client is a
:class:`~fedkernels.data.types.ClientData` in memory or arrays a writer streams to disk
(:mod:`fedkernels.data.client_store`), so a population written to a store keeps the fingerprint of the
eager list it came from, and a checkpoint resumes across the two.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import torch

from .types import ClientData

# torch's names for the dtypes a store holds (the fingerprint hashes torch's spelling)
TORCH_NAMES = {
    np.dtype(np.float32): "torch.float32",
    np.dtype(np.float64): "torch.float64",
    np.dtype(np.int32): "torch.int32",
    np.dtype(np.int64): "torch.int64",
}


def _shape(shape: tuple[int, ...]) -> str:
    """``json.dumps(list(shape))``."""
    return f"[{', '.join(map(str, shape))}]"


def new_fingerprint(num_clients: int) -> hashlib._Hash:
    """The hash before any client of a population of ``num_clients``."""
    return hashlib.sha256(f"fedkernels-data-v1 {num_clients}".encode())


def add_array(h: hashlib._Hash, a: np.ndarray) -> None:
    """One array: its dtype (torch's name) and shape as JSON, then its C-order bytes."""
    h.update(f'["{TORCH_NAMES[a.dtype]}", {_shape(a.shape)}]'.encode())  # json.dumps's spelling, faster
    h.update(np.ascontiguousarray(a).tobytes())


def add_tensor(h: hashlib._Hash, t: torch.Tensor) -> None:
    """One tensor, as :func:`add_array` of the same values (any dtype torch has)."""
    t = t.detach().cpu().contiguous()
    h.update(json.dumps([str(t.dtype), list(t.shape)]).encode())
    if t.numel():  # an empty tensor has no bytes (and may carry a stride uint8 cannot view)
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def add_client_arrays(
    h: hashlib._Hash,
    x: np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray],
    shape: tuple[int, int],
    indptr: np.ndarray,
    indices: np.ndarray,
    num_classes: int,
) -> None:
    """One client from arrays: ``x`` dense ``[n, F]`` or a CSR ``(crow [n + 1], col [nnz], values [nnz])``
    of ``shape``; labels ``indptr [n + 1]`` and ``indices`` int64. The bytes :func:`add_client` gives."""
    if isinstance(x, tuple):
        h.update(b"csr")
        for part in x:
            add_array(h, part)
        h.update(_shape(shape).encode())
    else:
        add_array(h, x)
    add_array(h, indptr)
    add_array(h, indices)
    h.update(str(int(num_classes)).encode())


def add_client(h: hashlib._Hash, c: ClientData) -> None:
    """One client: features (dense values, or a sparse CSR's row pointer, column ids and values and
    its shape), label CSR (indptr, indices) and class count."""
    x = c.x
    if x.layout == torch.sparse_csr:
        h.update(b"csr")
        for part in (x.crow_indices(), x.col_indices(), x.values()):
            add_tensor(h, part)
        h.update(json.dumps(list(x.shape)).encode())
    else:
        add_tensor(h, x)
    add_tensor(h, c.indptr)
    add_tensor(h, c.indices)
    h.update(str(int(c.num_classes)).encode())
