"""The Flower adapter under load on Flower's simulation engine: 10, 30 and 100 virtual SuperNodes,
30% of the train replies hostile every round (crashes, empty, garbage, oversized and header-bomb
arrays, codec bombs for l1diff: ``fedkernels.testing.flower_faults``, through Flower's public
ClientApp mods), for every strategy family; each run is checked bit-identical to the in-process run
in which the faulty clients send nothing.

    PYTHONPATH=src python -m bench.fl.flower_load                        # 10, 30, 100 clients, all families
    PYTHONPATH=src python -m bench.fl.flower_load --clients 100 --strategies fedavg --rounds 2
    PYTHONPATH=src python -m bench.fl.flower_load --quick                # 10 clients, 2 rounds, l1diff

Prints a Markdown table: seconds per round after the first (the first pays the workers' warm-up),
failed / chosen clients, the peak resident memory of the whole process tree (the ServerApp, Ray and
its workers) and whether the run equals the in-process one; writes the rows as JSON to
build/bench-results/flower_load.json (``--out PATH`` elsewhere).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import load_note, markdown_table, results_path, write_results
from bench.fl.proctree import TreeMonitor

FAMILIES = ["fedavg", "fedmlh", "fedss", "partialexchange", "l1diff"]
COLUMNS = ["strategy", "clients", "s/round", "failed / chosen", "peak RSS MiB", "equal"]


def one(strategy: str, clients: int, rounds: int, rate: float, seed: int) -> dict:
    import torch
    from flwr.simulation import run_simulation

    from fedkernels.fl.checkpoint import load_checkpoint
    from fedkernels.testing.flower_sim import Settings, apps, in_process_run

    backend = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": 2, "include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False},
    }
    with tempfile.TemporaryDirectory(prefix="fk-flower-load-") as tmp:
        s = Settings(
            strategy=strategy,
            num_clients=clients,
            clients_per_round=clients,
            rounds=rounds,
            seed=seed,
            fault_rate=rate,
            checkpoint=f"{tmp}/run.ckpt",
            result=f"{tmp}/result.json",
        )
        server, client = apps(s)
        t0 = time.perf_counter()
        with TreeMonitor() as mon:
            run_simulation(server, client, num_supernodes=clients, backend_config=backend)
        wall = time.perf_counter() - t0
        out = json.loads(Path(s.result).read_text())
        ref = in_process_run(dataclasses.replace(s, checkpoint="", result=""))
        state, meta = load_checkpoint(s.checkpoint, ref.state)
    equal = all(torch.equal(state[k], ref.state[k]) for k in ref.state) and [
        [c for c, _ in h["failed"]] for h in meta["history"]
    ] == [[c for c, _ in h.failed] for h in ref.history]
    seconds = [r["seconds"] for r in out["rounds"]]
    failed = sum(len(h["failed"]) for h in meta["history"])
    return {
        "strategy": strategy,
        "clients": clients,
        "s/round": statistics.fmean(seconds[1:] or seconds),
        "failed / chosen": f"{failed} / {clients * rounds}",
        "peak RSS MiB": mon.peak_rss_bytes / 2**20,
        "equal": "yes" if equal else "NO",
        "wall s": wall,
        "reasons": sorted({why.split(":")[0] for h in meta["history"] for _, why in h["failed"]}),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[10, 30, 100])
    p.add_argument("--strategies", nargs="+", default=FAMILIES)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=float, default=0.3, help="share of hostile train replies")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="result JSON (default: build/bench-results/flower_load.json)")
    p.add_argument("--quick", action="store_true", help="smoke run: 10 clients, 2 rounds, l1diff")
    args = p.parse_args()
    if args.quick:
        p.set_defaults(clients=[10], rounds=2, strategies=["l1diff"])
        args = p.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    rows = []
    for strategy in args.strategies:
        for n in args.clients:
            rows.append(one(strategy, n, args.rounds, args.rate, args.seed))
            print(markdown_table(rows[-1:], COLUMNS), flush=True)
    print("\n" + markdown_table(rows, COLUMNS))
    note = load_note()
    print(note)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path = write_results(
        "flower_load", rows, {"settings": settings, "note": note}, path=results_path("flower_load", out=args.out)
    )
    print(f"wrote {path}")
    return 0 if all(r["equal"] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
