"""FedMLH's hash family picked from p as the FedMLH paper does, and the warning when R * B >= p."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedkernels.fl.algorithms.fedmlh import FedMLH
from fedkernels.nn import default_hash_size as paper_hash_size


def test_the_papers_pairs_at_its_label_counts():
    assert paper_hash_size(131073) == (4, 4000)
    assert paper_hash_size(312330) == (8, 5000)


def test_shipped_datasets():
    assert paper_hash_size(159) == (4, 19)  # Bibtex
    assert paper_hash_size(983) == (4, 122)  # Delicious
    assert paper_hash_size(159, num_tables=2) == (2, 39)


@given(st.integers(9, 2_000_000))
def test_always_smaller_than_p(p):
    r, b = paper_hash_size(p)
    assert r >= 1 and b >= 2 and r * b < p


def test_options_win_over_the_rule():
    assert FedMLH(num_tables=3, num_buckets=7).hash_size(1000) == (3, 7)
    assert FedMLH(num_buckets=7).hash_size(1000) == (4, 7)
    assert FedMLH().hash_size(1000) == (4, 125)


def test_rb_at_least_p_warns_naming_both_options():
    with pytest.warns(UserWarning, match=r"num_tables \* num_buckets = 4 \* 10 = 40 >= p = 40"):
        FedMLH(num_buckets=10, hidden=()).init_state(8, 40, 0)


def test_bad_p():
    with pytest.raises(ValueError, match="num_classes"):
        paper_hash_size(0)
