"""The README stays a front page: at most 12 KB (detail goes to the docs/ pages it links to)."""

from __future__ import annotations

from python_tests.support.paths import ROOT

LIMIT = 12 * 1024


def test_readme_is_at_most_12_kb():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= LIMIT, f"README.md is {size} bytes, over {LIMIT}: move detail into a docs/ page it links to"
