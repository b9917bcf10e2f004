"""The terminal's results table fits the terminal (the most wanted columns first, the rest named) with
one format per column; results.md keeps every column."""

from __future__ import annotations

import pytest

from fedkernels.experiments.report import TABLE_COLUMNS, results_table, summary_rows, terminal_table


def result(name: str, p1: float, up: int, seconds: float, failed: int = 0) -> dict:
    return {
        "algorithm": name,
        "final": {"P@1": p1, "P@3": p1 / 2, "P@5": p1 / 3, "PSP@1": p1 / 4},
        "comm": {"total_up": up, "total_down": 2 * up, "best": p1, "rounds_to_best": 3, "bytes_to_best": up},
        "model_bytes": 4_000_000,
        "failed_clients": failed,
        "seconds": seconds,
    }


RESULTS = [result("FedAvg", 0.4123, 123_456_789, 47.3), result("FedMLH", 0.38, 9_876_543, 5.21, failed=2)]


@pytest.mark.parametrize("width", [40, 60, 80, 120, 300])
def test_fits_the_width_and_names_what_it_left_out(width: int) -> None:
    text = terminal_table(RESULTS, TABLE_COLUMNS, width=width)
    lines = text.splitlines()
    table, note = lines[:3], lines[3:]
    assert all(len(line) <= width for line in lines), text
    assert table[1].startswith("FedAvg ") and table[2].startswith("FedMLH ")
    present = [c for c in TABLE_COLUMNS if any(summary_rows(RESULTS)[0].get(c) is not None for _ in [0])]
    shown = [c for c in present if f" {c}" in f" {table[0]}"]  # header names, spaces included
    if note:
        left = " ".join(note).split(": ", 1)[1].rstrip(")").split(", ")
        assert sorted(shown + left) == sorted(present) and not set(shown) & set(left)
    else:
        assert set(shown) == set(present)
    assert "P@1" in shown and "failed clients" in shown  # the first to keep


def test_one_format_per_column() -> None:
    lines = terminal_table(RESULTS, ["algorithm", "P@1", "MB up", "s", "rounds to best"], width=200).splitlines()
    assert lines[0].split() == ["algorithm", "P@1", "MB", "up", "s", "rounds", "to", "best"]
    assert lines[1].split()[1:] == ["0.4123", "123", "47.3", "3"]
    assert lines[2].split()[1:] == ["0.3800", "10", "5.2", "3"]  # 3 significant digits of the column's largest value
    assert len({len(line) for line in lines}) == 1  # aligned


def test_zero_failed_clients_drop_out_of_the_terminal_table_only() -> None:
    clean = [result("FedAvg", 0.4, 1000, 1.0)]
    assert "failed clients" not in terminal_table(clean, TABLE_COLUMNS, width=300)
    assert "failed clients" in results_table(clean, TABLE_COLUMNS)
    assert results_table(RESULTS).count("|") > terminal_table(RESULTS, width=300).count("|")  # markdown: files
