"""Run every benchmark in bench/ops and bench/fl in its quick form (``make bench``), writing into build/bench-results/.

The one list of the benchmarks is ``QUICK`` below: each script with ``--quick`` and an explicit
``--out`` under build/bench-results, so a smoke run never overwrites the tables in bench/results (those are
full runs the README and docs quote; a bench script writes there only when its ``--out`` says so). A
script in bench/ops or bench/fl on neither ``QUICK`` nor ``NOT_BENCHMARKS`` fails the run, so a new benchmark cannot be
forgotten. Not part of CI (timings on shared runners mean nothing).

Usage: python tools/dev/bench_all.py [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH, OUT = ROOT / "bench", ROOT / "build" / "bench-results"  # bench/common.py QUICK_RESULTS

# script -> its quick run's arguments (the output path is added from the script's name)
QUICK: dict[str, list[str]] = {
    "sketch": ["--quick"],
    "spread": ["--quick"],
    "sampled": ["--quick"],
    "prox": ["--quick"],
    "select_norms": ["--quick"],
    "gpu_model": ["--quick"],
    "fl_fedaws": ["--quick"],
    "fl_fedaws_sweep": ["--quick"],
    "fl_fedmlh": ["--quick"],
    "fl_l1diff": ["--quick"],
    "fl_partial": ["--quick"],
    "fl_plots": ["--quick"],
    "fl_sampled": ["--quick"],
    "fl_xc_eval": ["--quick"],
    "fl_xc_scale": ["--quick"],
    "flower_load": ["--quick"],
    "flower_sim": ["--quick"],
    "flower_cohort": ["--quick"],
    "hardening": ["--quick"],
    "hardening_sweep": ["--quick"],
    "sketch_ceiling": ["--quick"],
    "privacy": ["--quick"],
    "topk": ["--quick"],
    "fma_peak": ["--quick"],
    "call_overhead": ["--quick"],
    "fl_batched": ["--quick"],
    "fl_population": ["--quick"],
    "threads": ["--quick"],
    "oracle_sleec": ["--quick"],
}
# scripts that need an environment variable: skipped, with the reason, when it is unset
NEEDS_ENV = {"gpu_model": ("FK_CUDA_EMU_MODULE", "the emulated CUDA module: `python emu/emulate.py build`")}
NOT_BENCHMARKS = (
    "common",
    "peers",
    "fl_report",
    "select_shapes",
    "spread_peers",
    "spread_faiss_worker",
    "proctree",
    "topk_faiss_worker",
    "paper_tables",
    "hashed_split_tv",
    "hardening_sweep3",  # its cases run in hardening_sweep
)  # helpers, printers


def bench_scripts() -> dict[str, Path]:
    """Every script of bench/ops and bench/fl by name (names are unique across the two folders)."""
    return {p.stem: p for p in sorted(BENCH.glob("*/*.py")) if p.stem != "__init__"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="run just these scripts (names without .py)")
    ap.add_argument("--list", action="store_true", help="print the scripts and their arguments, run nothing")
    args = ap.parse_args(argv)
    paths = bench_scripts()
    scripts = sorted(paths)
    unlisted = [s for s in scripts if s not in QUICK and s not in NOT_BENCHMARKS]
    if unlisted:
        print(f"bench scripts in no list of tools/dev/bench_all.py: {unlisted}", file=sys.stderr)
        return 2
    chosen = list(QUICK) if args.only is None else args.only
    bad = [s for s in chosen if s not in QUICK]
    if bad:
        print(f"--only: no quick run for {bad}; known: {sorted(QUICK)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    failed, skipped = [], []
    for name in chosen:
        var, what = NEEDS_ENV.get(name, (None, ""))
        if var is not None and not os.environ.get(var):
            skipped.append(f"{name} (set {var}: {what})")
            continue
        cmd = [
            sys.executable,
            "-m",
            f"bench.{paths[name].parent.name}.{name}",
            *QUICK[name],
            "--out",
            str(OUT / f"{name}.json"),
        ]
        print(f"$ {' '.join(cmd)}", flush=True)
        if args.list:
            continue
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=ROOT, env=env)
        print(f"-- {name}: exit {rc}, {time.perf_counter() - t0:.0f} s", flush=True)
        if rc:
            failed.append(name)
    if skipped:
        print(f"skipped: {', '.join(skipped)}")
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
