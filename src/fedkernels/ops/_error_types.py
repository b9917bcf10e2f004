"""Argument errors of the compiled ops keep their Python type on every torch.

The kernels raise ``std::invalid_argument`` / ``std::out_of_range`` for a bad argument (``FK_CHECK_VALUE``
/ ``FK_CHECK_INDEX``, csrc/common/stable/check.h). torch 2.10 to 2.14 turn those into ValueError and
IndexError; torch 2.15 turns every exception of a stable-ABI kernel into RuntimeError, keeping only its
message. So each such message starts with its type's tag, and the public wrappers, decorated with
:func:`keeps_error_types`, raise the tagged type with the tag removed, whichever torch carried it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

# The tags csrc/common/stable/check.h puts first in a message (python_tests/ops/test_error_types.py
# checks both sides spell them the same).
TAGS: dict[str, type[Exception]] = {"[ValueError] ": ValueError, "[IndexError] ": IndexError}

P = ParamSpec("P")
R = TypeVar("R")


def typed_error(exc: BaseException) -> Exception | None:
    """The error ``exc`` stands for when its message starts with a tag, else None."""
    message = str(exc)
    for tag, kind in TAGS.items():
        if message.startswith(tag):
            return kind(message[len(tag) :])
    return None


def keeps_error_types(fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap a public op so a tagged kernel error is raised as its own type, untagged.

    Under ``torch.compile`` the call is traced as it is (the compiled graph runs the kernel later,
    outside this function).
    """

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        if torch.compiler.is_compiling():
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError, IndexError) as exc:
            typed = typed_error(exc)
            if typed is None:
                raise
            raise typed from None

    return call
