"""The allocation check of every fuzz target, in one child process (one import, one set-up): each
target's seeds and 50 random mutations under ``RLIMIT_AS`` (see :mod:`python_tests.fuzz.bounded`).
Every result must be accepted or a ValueError, and the child's peak RSS may grow by less than
``BOUND_MIB`` (64 MiB) over all of them, whatever sizes the mutated bytes claim: each decoder's
memory is bounded by its input or by what its caller expects."""

from __future__ import annotations

from python_tests.fuzz.harness import run_bounded
from python_tests.fuzz.targets import all_targets


def test_every_target_within_the_bound():
    got = run_bounded(all_targets(), cases=50)
    assert got["cases"] >= 50 * len(all_targets())
