"""Running the CPU kernels at a chosen dispatch level (csrc/common/cpu_isa.h) inside one test process.

``FK_CPU_ISA`` caps the level for the whole process when fedkernels is imported; tests that compare
levels lower it further with ``at_level`` (``fedkernels._C._set_cpu_isa_limit``, tests only). A level
above what this process may run (the CPU lacks it, or ``FK_CPU_ISA`` caps below it) is skipped with the
reason, never run at a lower level under its name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import fedkernels
from fedkernels import _C

LEVELS = ("generic", "avx2", "avx512")


def _rank(level: str) -> int:
    return LEVELS.index(level)


def process_level() -> str:
    """The highest level this process may run: min(the CPU's, the FK_CPU_ISA cap read at import)."""
    _C._set_cpu_isa_limit(None)
    return fedkernels._info.build_info()["cpu_isa"]


def why_not(level: str) -> str | None:
    """Why ``level`` cannot run in this process, or None when it can."""
    info = fedkernels._info.build_info()
    if _rank(level) <= _rank(process_level()):
        return None
    if _rank(level) > _rank(info["cpu_isa_host"]):
        return f"CPU level {level} cannot run here: this CPU supports up to {info['cpu_isa_host']}"
    return f"CPU level {level} is capped by FK_CPU_ISA={info['cpu_isa_cap']} in this run"


@contextmanager
def at_level(level: str) -> Iterator[None]:
    """Run the block's CPU kernels at ``level`` (skips the test when the level cannot run here)."""
    reason = why_not(level)
    if reason is not None:
        pytest.skip(reason)
    try:
        got = _C._set_cpu_isa_limit(level)
        assert got == level, f"asked for {level}, the kernels dispatch to {got}"
        yield
    finally:
        _C._set_cpu_isa_limit(None)


def at_each_level(fn, levels: tuple[str, ...] = LEVELS) -> dict:
    """``{level: fn()}`` for every level in ``levels`` this process can run (at least generic)."""
    out = {}
    for level in levels:
        if why_not(level) is None:
            with at_level(level):
                out[level] = fn()
    return out
