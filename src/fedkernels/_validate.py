"""Argument checks shared by the Python wrappers: a clear ``ValueError`` naming the argument instead
of torch's schema error ("Expected a value of type 'int' ... found type 'int'") or a silent wrap."""

from __future__ import annotations

import operator
from typing import SupportsIndex

import torch

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def check_int(name: str, value: object, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """``value`` as an int if it is an integer (Python or numpy, not bool) in ``[lo, hi]``.

    A ``torch.SymInt`` (a traced size) passes through unchecked.

    Raises:
        ValueError: naming ``name``: not an integer, or out of ``[lo, hi]`` (by default int64's range).
    """
    if isinstance(value, torch.SymInt):
        return value  # type: ignore[return-value]  # a traced size stands in for the int
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got a bool")
    try:
        if not isinstance(value, SupportsIndex):  # (a tensor has __index__ but may still raise TypeError)
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {type(value).__name__}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got {v}")
    return v


_INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def as_tensor(name: str, value: object) -> torch.Tensor:
    """``value`` as a tensor: a tensor as is, a numpy array through ``torch.from_numpy`` (no copy
    when it can share memory). Anything else is a ``TypeError`` naming ``name``."""
    if isinstance(value, torch.Tensor):
        return value
    import numpy as np

    if isinstance(value, np.ndarray):
        if value.dtype == np.uint64:
            if value.size and int(value.max()) > INT64_MAX:
                raise ValueError(f"{name} holds values above int64's range")
            value = value.astype(np.int64)
        return torch.from_numpy(np.ascontiguousarray(value))
    raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(value).__name__}")


def as_int64(name: str, value: object) -> torch.Tensor:
    """An integer tensor or numpy array (int32 from scipy, say) as int64, converted once; int64
    tensors pass through untouched. Float or bool input is a ``ValueError`` naming ``name``."""
    t = as_tensor(name, value)
    if t.dtype == torch.int64:
        return t
    if t.dtype not in _INT_DTYPES:
        raise ValueError(f"{name} must hold integers (int64, or int32 e.g. from scipy), got {t.dtype}")
    return t.to(torch.int64)


def as_csr(indptr: object, indices: object, num_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR label sets as int64 ``(indptr [N + 1], indices [nnz])``, from tensors or numpy arrays of any
    integer dtype (scipy's int32 included).

    Args:
        num_rows: N when the caller knows it from another argument (e.g. the rows of ``x``); then an
            ``indptr`` of another length is a ``ValueError`` naming ``indptr``.
    """
    indptr_t, indices_t = as_int64("indptr", indptr), as_int64("indices", indices)
    if indptr_t.dim() != 1 or indptr_t.shape[0] < 1:
        raise ValueError(f"indptr must be 1-D with N + 1 >= 1 entries, got shape {tuple(indptr_t.shape)}")
    if indices_t.dim() != 1:
        raise ValueError(f"indices must be 1-D, got shape {tuple(indices_t.shape)}")
    if num_rows is not None and not isinstance(num_rows, torch.SymInt) and indptr_t.shape[0] != num_rows + 1:
        raise ValueError(
            f"indptr must have N + 1 = {num_rows + 1} entries (N = {num_rows} rows), got {indptr_t.shape[0]}"
        )
    return indptr_t, indices_t


def check_label_csr(
    indptr: torch.Tensor, indices: torch.Tensor, names: tuple[str, str] = ("indptr", "indices")
) -> None:
    """The values of int64 CSR label sets (as :func:`as_csr` returns them): ``indptr`` starts at 0,
    never decreases and ends at ``indices.numel()``, and every label id is ``>= 0``.

    Raises:
        ValueError: naming the argument (``names``) and the first rule it breaks.
    """
    p_name, i_name = names
    if int(indptr[0]) != 0:
        raise ValueError(f"{p_name}[0] must be 0, got {int(indptr[0])}")
    if indptr.numel() > 1 and bool((indptr[1:] < indptr[:-1]).any()):
        raise ValueError(f"{p_name} must never decrease")
    if int(indptr[-1]) != indices.numel():
        raise ValueError(f"{p_name}[-1] must equal {i_name}.numel() = {indices.numel()}, got {int(indptr[-1])}")
    if indices.numel() and int(indices.min()) < 0:
        raise ValueError(f"{i_name} must hold label ids >= 0, got {int(indices.min())}")


def as_table(table: object) -> torch.Tensor:
    """A hash table ``[p, R]`` as int32: int32 passes through; int64 (or another integer dtype, tensor
    or numpy) is range-checked once and narrowed. Bucket ids of at least 2**31 or below 0 are a
    ``ValueError`` naming ``table`` (the kernels check ``< B``)."""
    t = as_tensor("table", table)
    if t.dtype == torch.int32:
        return t
    if t.dtype not in _INT_DTYPES:
        raise ValueError(f"table must hold integer bucket ids (int32 or int64), got {t.dtype}")
    if t.numel() and not torch.compiler.is_compiling():
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi > 2**31 - 1:
            raise ValueError(f"table must hold bucket ids in [0, 2**31), got values in [{lo}, {hi}]")
    return t.to(torch.int32)
