"""tools/dev/simd_shared_lines.py: the lines each *_avx2.cpp / *_avx512.cpp pair repeats (issue 46)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools.dev import simd_shared_lines as ssl


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_shared_counts_lines_a_diff_matches_ignoring_indent_and_blanks(tmp_path: Path) -> None:
    _write(tmp_path / "a.cpp", "x\n\n  y\nz\nonly_a\n")
    _write(tmp_path / "b.cpp", "x\ny\nonly_b\nz\n\n")
    a, b = ssl.code_lines(tmp_path / "a.cpp"), ssl.code_lines(tmp_path / "b.cpp")
    assert a == ["x", "y", "z", "only_a"] and b == ["x", "y", "only_b", "z"]
    assert ssl.shared(a, b) == 3  # x, y, z in order
    assert ssl.shared(a, list(reversed(a))) == 1  # a subsequence, not a set


def test_pairs_need_both_levels(tmp_path: Path) -> None:
    _write(tmp_path / "csrc/k/one_avx2.cpp", "a\n")
    _write(tmp_path / "csrc/k/one_avx512.cpp", "a\n")
    _write(tmp_path / "csrc/k/lone_avx2.cpp", "a\n")  # no avx512 twin: not a pair
    assert ssl.pairs(tmp_path) == [(tmp_path / "csrc/k/one_avx2.cpp", tmp_path / "csrc/k/one_avx512.cpp")]


def test_main_prints_one_row_per_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path / "csrc/k/one_avx2.cpp", "a\nb\nc\nd\n")
    _write(tmp_path / "csrc/k/one_avx512.cpp", "a\nb\nx\n")
    monkeypatch.setattr(sys, "argv", ["simd_shared_lines.py", "--root", str(tmp_path)])
    assert ssl.main() == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row == ["csrc/k/one_{avx2,avx512}.cpp", "4", "3", "2", "50%"]
