"""Write each preset's ``[measured]`` table from its committed runs (what ``--list-presets`` shows).

A preset's committed runs are ``bench/results/fl/paper/<preset>/seed*/results.json`` (the preset as it
ships; the subfolders are variants and do not count). One seed's time is the sum of its algorithms'
``seconds`` (data loading left out); the table holds the median over the seeds, the folder, and the
machine the build facts in results.json name. Presets without such runs keep no table.

    python tools/dev/preset_times.py          # print what each preset would get
    python tools/dev/preset_times.py --write  # rewrite the presets' [measured] tables
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "src" / "fedkernels" / "experiments" / "presets"
RUNS = ROOT / "bench" / "results" / "fl" / "paper"
HEADER = "[measured]  # tools/dev/preset_times.py: the committed runs of this preset"


def measured(name: str) -> dict[str, object] | None:
    """The ``[measured]`` table of preset ``name`` from its committed runs, or None without any."""
    files = sorted((RUNS / name).glob("seed*/results.json"))
    if not files:
        return None
    per_seed, machines = [], set()
    for f in files:
        d = json.loads(f.read_text())
        per_seed.append(sum(r["seconds"] for r in d["results"]))
        b = d["build"]
        device = "GPU" if b.get("gpu_available") and d["config"].get("device", "cpu") != "cpu" else "CPU"
        machines.add(f"{device}, {b['threads']} thread(s), {b.get('cpu_isa', '?')} kernels, torch {b['torch_runtime']}")
    return {
        "seconds_per_seed": round(statistics.median(per_seed)),
        "seeds": len(files),
        "runs": f"bench/results/fl/paper/{name}/seed*/results.json",
        "machine": "; ".join(sorted(machines)),
    }


def toml_table(table: dict[str, object]) -> str:
    lines = [HEADER]
    for key, value in table.items():
        lines.append(f"{key} = {json.dumps(value)}")  # ints and plain strings: JSON spells them as TOML does
    return "\n".join(lines) + "\n"


def rewrite(path: Path, table: dict[str, object] | None) -> str:
    """The preset file's text with its ``[measured]`` table replaced (or dropped, for None)."""
    text = re.sub(r"\n\[measured\][^\[]*\Z", "\n", path.read_text()).rstrip("\n") + "\n"
    return text if table is None else text + "\n" + toml_table(table)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="rewrite the preset files")
    args = p.parse_args()
    for path in sorted(PRESETS.glob("*.toml")):
        table = measured(path.stem)
        print(f"{path.stem}: {table}")
        if args.write:
            path.write_text(rewrite(path, table))


if __name__ == "__main__":
    main()
