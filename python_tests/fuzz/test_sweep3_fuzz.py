"""Fuzzing the third hostile sweep's inputs (python_tests/fuzz/sweep3_targets.py): LF-* filter files and
sparse text, metrics inputs (predictions and label CSR with hostile ids), ``--propensity A B`` and model
settings. Mutated seeds, the sweep's hostile cases among them, must be refused with ValueError or accepted
and right (equal to the per-sample reference, within the memory bound); allocations: test_allocation_bound.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.fuzz.harness import check_seeds, fuzz_mutations
from python_tests.fuzz.targets import SWEEP3_TARGETS

EXAMPLES = {"filter": 100, "sparse_text": 100, "metrics": 150, "propensity": 80, "model_shape": 40}


@pytest.mark.parametrize("name", SWEEP3_TARGETS)
def test_seeds(name):
    check_seeds(name)


@pytest.mark.parametrize("name", SWEEP3_TARGETS)
def test_mutations(name):
    @settings(max_examples=EXAMPLES[name], deadline=None, derandomize=True)
    @given(data=st.data())
    def run(data):
        fuzz_mutations(name, data)

    run()
