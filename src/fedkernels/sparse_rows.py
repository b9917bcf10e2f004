"""Row access for feature matrices that are either dense or ``torch.sparse_csr``.

Extreme-classification features are sparse (a few hundred nonzeros out of 10^4 to 10^6 columns); a
:class:`~fedkernels.fl.ClientData` may hold them as a torch sparse CSR tensor end to end. Torch's CSR
layout has no ``index_select`` or slicing, so the loop's row gathers (minibatches, partitions,
evaluation batches) go through :func:`select_rows` and :func:`slice_rows`, which take either layout.
A model's first layer takes CSR input as is: ``torch.nn.functional.linear`` and ``torch.sparse.mm``
accept it and give gradients for the dense weights.
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
import torch

__all__ = ["csr_from_scipy", "is_sparse_csr", "select_rows", "slice_rows", "sparse_csr_tensor", "to_dense_rows"]


def is_sparse_csr(x: torch.Tensor) -> bool:
    """True for a ``torch.sparse_csr`` tensor."""
    return isinstance(x, torch.Tensor) and x.layout == torch.sparse_csr


def sparse_csr_tensor(
    crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """A 2-D ``torch.sparse_csr`` tensor (int64 ``crow [n+1]``, ``col [nnz]``, ``values [nnz]``), built
    without torch's "CSR support is in beta" warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse CSR tensor support is in beta.*")
        return torch.sparse_csr_tensor(crow, col, values, size=shape, check_invariants=False)


def csr_from_scipy(m: sp.spmatrix, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A scipy sparse matrix ``[n, F]`` as a ``torch.sparse_csr`` tensor (int64 indices, sorted columns)."""
    m = sp.csr_matrix(m)
    m.sort_indices()
    return sparse_csr_tensor(
        torch.from_numpy(m.indptr.astype(np.int64)),
        torch.from_numpy(m.indices.astype(np.int64)),
        torch.from_numpy(np.asarray(m.data)).to(dtype),
        (int(m.shape[0]), int(m.shape[1])),
    )


def select_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows ``idx`` (int64 ``[m]``, any order, repeats allowed) of ``x [n, F]``, in the layout of ``x``.

    Raises:
        IndexError: an index outside ``[0, n)`` (for both layouts).
    """
    idx = torch.as_tensor(idx, dtype=torch.int64, device=x.device)
    if not is_sparse_csr(x):
        return x[idx]
    n = int(x.shape[0])
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise IndexError(f"row index out of range [0, {n}) for features with {n} rows")
    crow, col, val = x.crow_indices(), x.col_indices(), x.values()
    starts = crow[idx]
    lens = crow[idx + 1] - starts
    out_crow = torch.zeros(idx.numel() + 1, dtype=torch.int64, device=x.device)
    torch.cumsum(lens, 0, out=out_crow[1:])
    total = int(out_crow[-1])
    # position of every kept nonzero: its row's start in x plus its offset within the row
    pos = torch.repeat_interleave(starts, lens) + (
        torch.arange(total, device=x.device) - torch.repeat_interleave(out_crow[:-1], lens)
    )
    return sparse_csr_tensor(out_crow, col[pos], val[pos], (idx.numel(), int(x.shape[1])))


def slice_rows(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of ``x [n, F]`` (clipped as Python slicing does), in the layout of ``x``."""
    if not is_sparse_csr(x):
        return x[start:stop]
    lo, hi, _ = slice(start, stop).indices(int(x.shape[0]))
    return select_rows(x, torch.arange(lo, max(lo, hi), dtype=torch.int64, device=x.device))


def to_dense_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as a dense tensor (a no-op for dense input); for small data and references only."""
    return x.to_dense() if is_sparse_csr(x) else x
