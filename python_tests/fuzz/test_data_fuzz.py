"""Fuzzing the dataset readers (XC text, libsvm multi-label, scipy .npz pairs, each side): mutated
seeds, the audit's hostile files among them (nan/inf/1e999 values, non-ASCII digits, a huge F or L,
a 2^40-row COO matrix, an .npy header claiming 2^40 elements), must be refused with ValueError naming
the file, or read to finite float32 data that round-trips through the writers; allocations: test_allocation_bound.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.fuzz.harness import check_seeds, fuzz_mutations

TARGETS = ["xc", "libsvm", "npz_x", "npz_y"]


@pytest.mark.parametrize("name", TARGETS)
def test_seeds(name):
    check_seeds(name)


@pytest.mark.parametrize("name", TARGETS)
@settings(max_examples=100, deadline=None, derandomize=True)
@given(data=st.data())
def test_mutations(name, data):
    fuzz_mutations(name, data)
