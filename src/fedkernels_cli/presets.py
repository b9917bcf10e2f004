"""``fedkernels run --list-presets``: the shipped presets, one line each, read without importing torch.

A preset's ``[measured]`` table (written by ``tools/dev/preset_times.py`` from the committed runs in
``bench/results/fl/paper/<name>``) gives the time one seed took; presets without one say so.
"""

from __future__ import annotations

import shutil
import textwrap

from .standalone import preset_files, read_toml

PRESET_SEEDS = 3  # seeds a --preset run averages over unless --seeds says otherwise


def duration(seconds: float) -> str:
    """``42 s``, ``3.1 min`` or ``1.2 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def preset_rows() -> list[tuple[str, ...]]:
    """``(name, dataset, rounds, seeds, time a seed, algorithms)`` of every shipped preset, as printed."""
    rows: list[tuple[str, ...]] = []
    for path in preset_files():
        data = read_toml(path)
        measured = data.get("measured") or {}
        seconds = measured.get("seconds_per_seed")
        time = f"{duration(seconds)}" if isinstance(seconds, (int, float)) else "not measured"
        algos = ", ".join(data.get("algorithms", []))
        dataset = str(data.get("dataset", "synthetic"))
        rows.append((path.stem, dataset, str(data.get("rounds", "?")), str(PRESET_SEEDS), time, algos))
    return rows


def cmd_list_presets() -> int:
    """Print every shipped preset: name, data, rounds, seeds, the measured time of one seed, algorithms."""
    header = ("preset", "data", "rounds", "seeds", "time a seed", "algorithms")
    rows = [header, *preset_rows()]
    w = [max(len(r[i]) for r in rows) for i in range(5)]
    columns = shutil.get_terminal_size().columns
    for r in rows:
        line = f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:>{w[2]}}  {r[3]:>{w[3]}}  {r[4]:<{w[4]}}  {r[5]}"
        print(line if len(line) <= columns else line[: max(columns - 1, 0)] + "…")
    note = (
        "time a seed: what one seed of the preset took in the committed runs (bench/results/fl/paper/<preset>; "
        "the preset file's [measured] table says on what machine). Run one with `fedkernels run --preset NAME`; "
        "--seeds N changes the number of seeds."
    )
    print("\n" + textwrap.fill(note, width=max(min(columns, 100), 40)))
    return 0
