"""Label sets in the forms users hold them, as the CSR pair every op and module takes.

``indptr`` int64 ``[N + 1]`` and ``indices`` int64 ``[nnz]``: sample n's labels are
``indices[indptr[n]:indptr[n + 1]]``, in the order given (label lists) or ascending (multi-hot).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from .._validate import INT64_MAX, as_tensor

__all__ = ["labels_to_csr", "multi_hot_to_csr"]


def labels_to_csr(labels: Sequence[Iterable[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of per-sample label lists.

    Args:
        labels: N iterables of non-negative integer class ids (Python or numpy ints; a sample may
            have none). Order within a sample is kept; duplicates are kept too.

    Returns:
        ``(indptr int64 [N + 1], indices int64 [nnz])``.

    Raises:
        ValueError: naming ``labels``: a negative, non-integer or too large id.

    Example:
        >>> labels_to_csr([[3, 1], [], [7]])   # (tensor([0, 2, 2, 3]), tensor([3, 1, 7]))
    """
    indptr = [0]
    flat: list[int] = []
    for n, row in enumerate(labels):
        if isinstance(row, (str, bytes)) or not isinstance(row, Iterable):
            raise ValueError(f"labels[{n}] must be an iterable of class ids, got {type(row).__name__}")
        for label in row:
            if isinstance(label, (bool, np.bool_)) or not isinstance(label, (int, np.integer)):
                raise ValueError(f"labels[{n}] holds {label!r}: class ids must be integers")
            if not 0 <= int(label) <= INT64_MAX:
                raise ValueError(f"labels[{n}] holds {int(label)}: class ids must lie in [0, 2**63)")
            flat.append(int(label))
        indptr.append(len(flat))
    return torch.tensor(indptr, dtype=torch.int64), torch.tensor(flat, dtype=torch.int64)


def multi_hot_to_csr(y: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of a dense 0/1 label matrix.

    Args:
        y: ``[N, p]`` tensor or numpy array of 0s and 1s (bool, integer or floating dtype).

    Returns:
        ``(indptr int64 [N + 1], indices int64 [nnz])``, each sample's labels ascending.

    Raises:
        ValueError: naming ``y``: not 2-D, or an entry other than 0 and 1.

    Example:
        >>> multi_hot_to_csr(torch.tensor([[0, 1, 1], [0, 0, 0]]))   # (tensor([0, 2, 2]), tensor([1, 2]))
    """
    t = as_tensor("y", y)
    if t.dim() != 2:
        raise ValueError(f"y must be a 2-D [N, p] 0/1 matrix, got shape {tuple(t.shape)}")
    if t.dtype != torch.bool:
        if t.is_complex():
            raise ValueError(f"y must be real 0/1, got {t.dtype}")
        if t.numel() and not bool(((t == 0) | (t == 1)).all()):
            raise ValueError("y must hold only 0 and 1")
        t = t != 0
    t = t.cpu()
    rows, cols = t.nonzero(as_tuple=True)  # row-major order: rows ascending, columns ascending within
    indptr = torch.zeros(t.shape[0] + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(torch.bincount(rows, minlength=t.shape[0]), 0)
    return indptr, cols.to(torch.int64)
