"""Fuzzing the safetensors payload decoder against a spec (fixed, shared and open dims, an optional
tensor, id ranges, uniqueness, an element bound): mutated seeds (bit flips, truncation, splices,
huge size fields, number tokens) must be refused with ValueError, or decode to exactly the bytes their
header points at and re-encode to the same tensors; allocations: test_allocation_bound.py."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.fuzz.harness import check_seeds, fuzz_mutations


def test_seeds():
    check_seeds("payload")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data())
def test_mutations(data):
    fuzz_mutations("payload", data)
