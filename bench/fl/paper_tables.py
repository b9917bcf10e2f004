"""Tables of the committed paper runs (bench/results/fl/paper/<preset>/<variant>/, slimmed by tools/results.py).

For every variant folder: one row per algorithm with the seeds, the final, late-window and best value
of the table's metric (``client-shared-P@1``, every client's model on the shared test set, where the run
reported it; else per-client ``client-P@1`` where the run evaluated clients on their own held-out rows;
else ``P@1``) as mean ± sample std, the per-seed final values, MB up / down per seed, and the
split statistics and strategy diagnostics of the first seed. docs/experiments.md quotes these tables.

    python -m bench.fl.paper_tables                       # every preset
    python -m bench.fl.paper_tables fedalc-bibtex         # one
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

PAPER = Path(__file__).resolve().parents[1] / "results" / "fl" / "paper"


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} ± {sd:.3f}"


def variant_rows(folder: Path, metric: str | None = None) -> tuple[list[dict], dict]:
    """Rows for one variant folder and the first seed's split / diagnostics."""
    seeds = sorted(folder.glob("seed*/results.json"), key=lambda p: int(p.parent.name[4:]))
    runs = [json.loads(p.read_text()) for p in seeds]
    if not runs:
        return [], {}
    finals = [r["final"] for run in runs for r in run["results"]]
    shared = any("client-shared-P@1" in f for f in finals)
    per_client = any("client-P@1" in f for f in finals)
    metric = metric or ("client-shared-P@1" if shared else "client-P@1" if per_client else "P@1")
    by_alg: dict[str, list[dict]] = {}
    for run in runs:
        for r in run["results"]:
            by_alg.setdefault(r["algorithm"], []).append(r)
    rows = []
    for alg, group in by_alg.items():
        fin = [r["final"][metric] for r in group if metric in r["final"]]
        late = [r["late"][metric] for r in group if metric in r.get("late", {})]
        best = [r["best"][metric] for r in group if metric in r.get("best", {})]
        # comm's totals are the sums over the rounds; the committed (slim) results.json has no per-round history
        up = [r["comm"]["total_up"] / 1e6 for r in group]
        down = [r["comm"]["total_down"] / 1e6 for r in group]
        # the table's other columns on the same footing as its metric (per client where it is per client)
        prefix = metric[: -len("P@1")] if metric.endswith("P@1") else ""
        # beside a per-client metric: the other per-client form and the global model's P@1
        others = ("client-P@1", "P@1") if prefix == "client-shared-" else ("client-shared-P@1", "P@1") if prefix else ()
        extra = {
            k: _ms([r["final"][k] for r in group if k in r["final"]])
            for k in (f"{prefix}P@3", f"{prefix}P@5", *others, "MAP@R", "rMAP@10")
        }
        rows.append(
            {
                "algorithm": alg,
                "seeds": len(group),
                "metric": metric,
                "final": _ms(fin),
                "late": _ms(late),
                "best": _ms(best),
                "per seed": ", ".join(f"{v:.3f}" for v in fin),
                "MB up": f"{statistics.mean(up):.2f}",
                "MB down": f"{statistics.mean(down):.2f}",
                **{k: v for k, v in extra.items() if v != "-"},
                "diagnostics": group[0].get("diagnostics") or {},
            }
        )
    info = {"split": runs[0].get("split", {}), "config": runs[0]["config"]}
    return rows, info


def print_preset(preset: Path) -> None:
    print(f"\n## {preset.name}")
    folders = sorted(p for p in preset.iterdir() if p.is_dir() and not p.name.startswith("seed"))
    if any(preset.glob("seed*/results.json")):  # the preset's own run, beside any variants
        folders.insert(0, preset)
    for folder in folders:
        rows, info = variant_rows(folder)
        if not rows:
            continue
        split = {k: round(v, 3) for k, v in info["split"].items()}
        print(f"\n### {folder.name if folder != preset else '(preset)'}  split {split}")
        cols = ["algorithm", "seeds", "metric", "final", "late", "best", "per seed", "MB up", "MB down"]
        extras = (
            "P@3",
            "P@5",
            "client-P@3",
            "client-P@5",
            "client-shared-P@3",
            "client-shared-P@5",
            "client-shared-P@1",
            "client-P@1",
            "P@1",
            "MAP@R",
            "rMAP@10",
        )
        cols += [k for k in extras if any(k in r for r in rows)]
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
        for r in rows:
            print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
        for r in rows:
            if r["diagnostics"]:
                print(f"- {r['algorithm']} diagnostics (seed 0): {r['diagnostics']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("presets", nargs="*", help="preset folders under bench/results/fl/paper (default: all)")
    args = ap.parse_args()
    names = args.presets or sorted(p.name for p in PAPER.iterdir() if p.is_dir())
    for name in names:
        print_preset(PAPER / name)


if __name__ == "__main__":
    main()
