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
