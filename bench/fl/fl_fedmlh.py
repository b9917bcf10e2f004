"""FedMLH against FedAvg on real data (Delicious, Bibtex) under the FedMLH partition.

10 clients, 4 per round, 5 local epochs, linear models (FedAvg: F x p weights; FedMLH: R tables
of F x B). Reports P@1/3/5, PSP@k, the frequent/infrequent split of P@k, bytes to the best P@1,
bytes to reach the lower of the two best P@1 (a level both reach), and model size per client.

    PYTHONPATH=src python -m bench.fl.fl_fedmlh [--rounds N] [--seeds 0 1 2] [--datasets bibtex] [--append]
    PYTHONPATH=src python -m bench.fl.fl_fedmlh --out bench/results/fl/fl_fedmlh.json   # the committed table
    PYTHONPATH=src python -m bench.fl.fl_fedmlh --quick         # smoke run: Bibtex, 2 rounds, 1 local epoch

Writes build/bench-results/fl_fedmlh.json and fl_fedmlh_<dataset>.png beside it; ``--out PATH`` says
where (bench/results only through it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import asdict
from pathlib import Path

import torch

from bench.common import machine, markdown_table, results_path, write_results
from fedkernels.data.locations import data_roots, find_dataset
from fedkernels.experiments.experiment import ExperimentConfig, add_common_target, prepare_data, run_algorithm
from fedkernels.experiments.report import plot_accuracy, summary_rows

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"

# Per dataset: FedMLH's hash family (R tables of B buckets, R * B < p), the frequent-class count
# (10% of the labels), and the rounds of the published run (what fit the time the shared, heavily
# loaded 2-core machine could give it: Delicious's FedMLH split copies most samples to several clients).
SETTINGS = {
    "delicious": {"num_tables": 4, "num_buckets": 100, "num_frequent": 98, "rounds": 2},
    "bibtex": {"num_tables": 4, "num_buckets": 20, "num_frequent": 16, "rounds": 10},
}

# the per-run table columns (stored in the JSON as "columns": bench/fl/fl_report.py prints those)
COLUMNS = [
    "dataset",
    "algorithm",
    "P@1",
    "P@3",
    "P@5",
    "PSP@1",
    "PSP@5",
    "P@1_freq",
    "P@1_infreq",
    "P@5_freq",
    "P@5_infreq",
    "best P@1",
    "rounds to best",
    "MB to best",
    "MB to target",
    "model MB",
    "s",
]


def run_dataset(
    name: str,
    folder: Path,
    rounds: int | None,
    seed: int,
    plot: Path | None = None,
    local_epochs: int = 5,
) -> tuple[list[dict], dict]:
    """Both algorithms on one dataset (P@1 curves plotted to ``plot`` when given); returns the summary
    rows and the full results."""
    s = SETTINGS[name]
    cfg = ExperimentConfig(
        algorithms=["FedAvg", "FedMLH"],
        algorithm_options={
            "FedAvg": {"hidden": []},
            "FedMLH": {"num_tables": s["num_tables"], "num_buckets": s["num_buckets"], "hidden": []},
        },
        dataset=str(folder),
        partition="fedmlh",
        num_frequent=s["num_frequent"],
        clients=10,
        clients_per_round=4,
        rounds=rounds or s["rounds"],
        local_epochs=local_epochs,
        batch_size=64,
        optimizer="adam",
        lr=0.01,
        seed=seed,
    )
    cfg.validate()
    data = prepare_data(cfg)

    def progress(rec, name=name) -> None:
        print(
            f"  {name} round {rec.round + 1}/{cfg.rounds}: P@1 {rec.metrics.get('P@1', float('nan')):.4f}, "
            f"{rec.seconds:.0f} s",
            flush=True,
        )

    results = []
    for a in cfg.algorithms:
        print(f"{name}: {a}", flush=True)
        results.append(run_algorithm(a, cfg, data, progress))
    target = add_common_target(results)
    rows = [{"dataset": name, **row} for row in summary_rows(results)]
    avg, mlh = results
    ratio = {
        "model_bytes_FedAvg_over_FedMLH": avg["model_bytes"] / mlh["model_bytes"],
        "bytes_to_target_FedAvg_over_FedMLH": (
            avg["comm"]["bytes_to_target"] / mlh["comm"]["bytes_to_target"]
            if avg["comm"]["bytes_to_target"] and mlh["comm"]["bytes_to_target"]
            else None
        ),
    }
    if plot is not None:
        plot_accuracy(
            plot, results, "P@1", f"{name}: FedMLH partition, 10 clients, 4/round, {local_epochs} local epochs"
        )
    full = {
        "config": asdict(cfg),
        "dataset": data.dataset.notes,
        "clients": [len(c) for c in data.clients],
        "target_P@1": target,
        "ratios": ratio,
        "results": results,
    }
    return rows, full


SUMMARY = ["P@1", "P@3", "P@5", "P@1_freq", "P@1_infreq", "MB to target"]


def seed_summary(rows: list[dict]) -> list[dict]:
    """Per dataset and algorithm: ``"mean +- std"`` (sample std) of the SUMMARY columns over the seeds."""
    out = []
    for key in dict.fromkeys((r["dataset"], r["algorithm"]) for r in rows):
        group = [r for r in rows if (r["dataset"], r["algorithm"]) == key]
        row = {"dataset": key[0], "algorithm": key[1], "seeds": len(group)}
        for c in SUMMARY:
            v = [r[c] for r in group if r.get(c) is not None]
            if v:
                row[c] = f"{statistics.mean(v):.4f} +- {statistics.stdev(v) if len(v) > 1 else 0.0:.4f}"
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=None, help="rounds for every dataset (default: per dataset)")
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[0],
        help="one run per seed; with several, rows carry the seed and a mean +- std table is added",
    )
    ap.add_argument(
        "--data-dir",
        type=Path,
        default=DATA if DATA.is_dir() else None,
        help="a folder of datasets by name, searched first (default: the checkout's ../shared/data where it "
        "exists); then where `fedkernels run --dataset NAME` looks (the data folder of `fedkernels data get`)",
    )
    ap.add_argument("--datasets", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--append", action="store_true", help="keep the other datasets' results already in the JSON")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: no barrier waits on a busy machine)")
    ap.add_argument("--local-epochs", type=int, default=5)
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result JSON (default: build/bench-results/fl_fedmlh.json; plots beside it)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: Bibtex, 2 rounds, 1 local epoch")
    args = ap.parse_args()
    if args.quick:  # the quick settings become the defaults: explicit flags still win
        ap.set_defaults(datasets=["bibtex"], rounds=2, local_epochs=1)
        args = ap.parse_args()
    out = results_path("fl_fedmlh", out=args.out)
    out.parent.mkdir(parents=True, exist_ok=True)  # the plots are written beside it before the JSON
    torch.set_num_threads(args.threads)
    rows, full = [], {}
    old = out
    if args.append and old.is_file():
        prev = json.loads(old.read_text())
        rows = [r for r in prev["rows"] if r["dataset"] not in args.datasets]
        full = {k: v for k, v in prev.get("runs", {}).items() if k.split("/")[0] not in args.datasets}
    t0 = time.perf_counter()
    for name in args.datasets:
        found = find_dataset(name, args.data_dir)
        if found is None:
            where = " or ".join(str(r) for r in data_roots(args.data_dir))
            print(f"skip {name}: not found in {where} (`fedkernels data get {name}` downloads it)")
            continue
        for seed in args.seeds:
            png = out.with_name(f"{out.stem}_{name}.png") if seed == args.seeds[0] else None
            r, f = run_dataset(name, found.path, args.rounds, seed, plot=png, local_epochs=args.local_epochs)
            rows += [{**row, "seed": seed} for row in r]
            full[name if seed == args.seeds[0] else f"{name}/seed{seed}"] = f
            print(
                f"{name} seed {seed}: model bytes FedAvg/FedMLH = "
                f"{f['ratios']['model_bytes_FedAvg_over_FedMLH']:.2f}x, "
                f"bytes to P@1 >= {f['target_P@1']:.4f}: FedAvg/FedMLH = "
                f"{f['ratios']['bytes_to_target_FedAvg_over_FedMLH']}",
                flush=True,
            )
    summary = seed_summary(rows)
    path = write_results(
        "fl_fedmlh",
        rows,
        {
            "runs": full,
            "seed_summary": summary,
            "seconds": time.perf_counter() - t0,
            "loadavg_at_end": os.getloadavg(),
            "note": "shared 2-core machine; compare rows within this run",
            "columns": COLUMNS,  # bench/fl/fl_report.py prints these
        },
        path=out,
    )
    print(markdown_table(rows, ["seed", *COLUMNS]))
    print("\nmean +- std over seeds\n")
    print(markdown_table(summary, ["dataset", "algorithm", "seeds", *SUMMARY]))
    print(f"\nwrote {path} ({machine()['threads']} threads, {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
