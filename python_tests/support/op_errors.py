"""pytest.raises for a direct call of ``torch.ops.fedkernels.*`` (not a fedkernels wrapper).

A kernel's argument error reaches a raw op's caller as ValueError / IndexError on torch 2.10 to 2.14
and as RuntimeError on torch 2.15 (which carries any exception of a stable-ABI kernel so); its
message's tag names the type either way (src/fedkernels/ops/_error_types.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from fedkernels.ops._error_types import typed_error


@contextmanager
def raw_op_raises(kind: type[Exception], match: str) -> Iterator[None]:
    """Expect the raw op inside to reject its arguments with ``kind``; ``match`` is searched in the message."""
    with pytest.raises((kind, RuntimeError)) as info:
        yield
    typed = typed_error(info.value)
    assert type(typed) is kind, f"expected a tagged {kind.__name__}, got {info.value!r}"
    assert re.search(match, str(typed)), f"{match!r} not in {str(typed)!r}"
