"""Fuzzing checkpoint loading: a real run's checkpoint (and one with ``round = -5``) mutated; every
result must be a ValueError naming the file, or, where the SHA-256 passes, exactly the original
state and metadata; allocations: test_allocation_bound.py (the file's size is checked before it
is read)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.fuzz.harness import check_seeds, fuzz_mutations


def test_seeds():
    check_seeds("checkpoint")


@settings(max_examples=80, deadline=None, derandomize=True)
@given(data=st.data())
def test_mutations(data):
    fuzz_mutations("checkpoint", data)
