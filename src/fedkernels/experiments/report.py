"""Reporting a run: the results table, JSON and CSV files, and accuracy plots (PNG, if matplotlib
is installed)."""

from __future__ import annotations

import csv
import json
import math
import shutil
import textwrap
from pathlib import Path
from typing import Any

MB = 1e6


def _mb(b: float | None) -> float | None:
    """Bytes in MB; None (a quantity never reached) stays None."""
    return None if b is None else b / MB


TABLE_COLUMNS = [
    "algorithm",
    "P@1",
    "P@3",
    "P@5",
    "PSP@1",
    "PSP@3",
    "PSP@5",
    "P@1_freq",
    "P@1_infreq",
    "MB up",
    "MB down",
    "best P@1",
    "rounds to best",
    "MB to best",
    "MB to target",
    "model MB",
    "failed clients",
    "ε",
    "s",
]


def summary_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per algorithm: final metrics, bytes (in MB = 1e6 bytes), rounds to best."""
    rows = []
    for r in results:
        c = r["comm"]
        row = {
            "algorithm": r["algorithm"],
            **r["final"],
            "MB up": c["total_up"] / MB,
            "MB down": c["total_down"] / MB,
            "best P@1": c["best"],
            "rounds to best": c["rounds_to_best"],
            "MB to best": _mb(c["bytes_to_best"]),
            "MB to target": _mb(c.get("bytes_to_target")),
            "model MB": r["model_bytes"] / MB,
            "failed clients": r.get("failed_clients", 0),
            "ε": (r.get("privacy") or {}).get("epsilon"),  # client-level DP runs only
            "s": r["seconds"],
        }
        rows.append(row)
    return rows


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def results_table(results: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A markdown table of :func:`summary_rows` (columns with no value anywhere are dropped)."""
    rows = summary_rows(results)
    cols = [c for c in (columns or TABLE_COLUMNS) if any(row.get(c) is not None for row in rows)]
    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "\n".join("| " + " | ".join(_fmt(row.get(c)) for c in cols) + " |" for row in rows)


# What the terminal table keeps when the terminal is narrow, first to last; the other columns follow
# in table order. Every column stays in results.md.
TERMINAL_FIRST = [
    "algorithm",
    "P@1",
    "failed clients",
    "ε",
    "MB up",
    "MB down",
    "P@3",
    "P@5",
    "best P@1",
    "MB to target",
]


def _column_cells(col: str, values: list[Any]) -> list[str]:
    """One format per column: metrics at 4 decimals, counts as integers, sizes and seconds at 3
    significant digits of the column's largest value."""
    if col == "ε":
        return ["-" if v is None else f"{v:.3g}" for v in values]
    if "@" in col:
        return ["-" if v is None else f"{v:.4f}" for v in values]
    if all(v is None or isinstance(v, (int, str)) for v in values):  # names and counts
        return ["-" if v is None else str(v) for v in values]
    top = max((abs(v) for v in values if v is not None), default=0.0)
    decimals = 0 if top == 0 else min(4, max(0, 2 - math.floor(math.log10(top))))
    return ["-" if v is None else f"{v:,.{decimals}f}" for v in values]


def terminal_table(results: list[dict[str, Any]], columns: list[str] | None = None, width: int | None = None) -> str:
    """The results as an aligned text table at most ``width`` characters wide (default: the terminal's):
    the columns of :data:`TERMINAL_FIRST` first, then the others in ``columns`` order while they fit;
    a last line names the columns left out (all of them are in results.md). A column that is ``-``
    everywhere, or 0 failed clients everywhere, is left out."""
    width = width or shutil.get_terminal_size().columns
    rows = summary_rows(results)
    cols = [c for c in (columns or TABLE_COLUMNS) if any(row.get(c) is not None for row in rows)]
    if "failed clients" in cols and not any(row.get("failed clients") for row in rows):
        cols.remove("failed clients")
    cells = {c: _column_cells(c, [row.get(c) for row in rows]) for c in cols}
    widths = {c: max(len(c), *(len(x) for x in cells[c])) for c in cols}
    order = [c for c in TERMINAL_FIRST if c in cols] + [c for c in cols if c not in TERMINAL_FIRST]
    chosen, used = set(), -2
    for c in order:
        if c == "algorithm" or used + 2 + widths[c] <= width:
            chosen.add(c)
            used += 2 + widths[c]
    shown = [c for c in cols if c in chosen]

    def line(values: list[str]) -> str:
        pairs = zip(shown, values, strict=True)
        return "  ".join(v.ljust(widths[c]) if c == "algorithm" else v.rjust(widths[c]) for c, v in pairs)

    lines = [line(shown)] + [line([cells[c][i] for c in shown]) for i in range(len(rows))]
    left = [c for c in cols if c not in chosen]
    if left:
        note = f"({len(left)} more columns in results.md: {', '.join(left)})"
        lines += textwrap.wrap(note, width=max(width, 40))
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    """Write ``payload`` as indented JSON."""
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path


def _short(value: Any) -> Any:
    """A float at 7 significant digits (float32's precision, where the metrics come from): 0.387, not
    0.38699999451637268; anything else as it is."""
    return float(f"{value:.7g}") if isinstance(value, float) else value


def write_csv(path: Path, results: list[dict[str, Any]]) -> Path:
    """One CSV row per algorithm and round: bytes, cumulative bytes, seconds and metrics."""
    rows = []
    for r in results:
        up = down = 0
        for h in r["history"]:
            up, down = up + h["bytes_up"], down + h["bytes_down"]
            rows.append(
                {
                    "algorithm": r["algorithm"],
                    "round": h["round"] + 1,
                    "bytes_up": h["bytes_up"],
                    "bytes_down": h["bytes_down"],
                    "cum_bytes_up": up,
                    "cum_bytes_down": down,
                    "seconds": round(h["seconds"], 4),
                    **{k: _short(v) for k, v in h["metrics"].items()},
                    **{k: _short(v) for k, v in h.get("privacy", {}).items()},
                }
            )
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return path


def plot_accuracy(path: Path, results: list[dict[str, Any]], metric: str = "P@1", title: str = "") -> Path | None:
    """``metric`` against rounds and against cumulative MB (up + down), one line per algorithm.
    Returns ``None`` (and writes nothing) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax_r, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for r in results:
        xs_r, xs_b, ys = [], [], []
        total = 0
        for h in r["history"]:
            total += h["bytes_up"] + h["bytes_down"]
            if metric in h["metrics"]:
                xs_r.append(h["round"] + 1)
                xs_b.append(total / MB)
                ys.append(h["metrics"][metric])
        ax_r.plot(xs_r, ys, marker="o", ms=3, label=r["algorithm"])
        ax_b.plot(xs_b, ys, marker="o", ms=3, label=r["algorithm"])
    ax_r.set_xlabel("round")
    ax_b.set_xlabel("cumulative communication, MB (up + down)")
    ax_b.set_xscale("log")
    for ax in (ax_r, ax_b):
        ax.set_ylabel(f"test {metric}")
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
