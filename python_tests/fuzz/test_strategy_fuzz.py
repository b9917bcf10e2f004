"""Fuzzing every registered strategy's server-side checks: client 0's honest round-0 request and
upload (small models), and hostile ones (the audit's FedSS request of id 0 repeated, a lie about
num_positives, out-of-range and too many ids, a header shape bomb, the codec's bias bomb inside an
l1-difference upload), mutated. The request must be refused with ValueError or give a download no
larger than the model plus its id list; the upload must be refused with ValueError or pass
``check_upload`` and aggregate to a finite state of the same names, dtypes and shapes. Allocations:
test_allocation_bound.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.fuzz.harness import check_seeds, fuzz_mutations
from python_tests.fuzz.targets import strategy_names, strategy_targets

TARGETS = strategy_targets()


def test_every_strategy_has_targets():
    uploads = {t.split(":")[1] for t in TARGETS if t.startswith("upload:")}
    assert uploads == set(strategy_names())
    assert {"request:fedss", "request:fedaws", "request:fedalc"} <= set(TARGETS)


@pytest.mark.parametrize("name", TARGETS)
def test_seeds(name):
    check_seeds(name)


@pytest.mark.parametrize("name", TARGETS)
@settings(max_examples=30, deadline=None, derandomize=True)
@given(data=st.data())
def test_mutations(name, data):
    fuzz_mutations(name, data)
