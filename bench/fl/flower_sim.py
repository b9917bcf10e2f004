"""fedkernels over Flower's simulation engine at 10, 100 and 1000 virtual clients (100 per round):
seconds per round, discovery time, CPU time and peak memory, against the in-process loop on the
same shards in the same run.

The app is ``fedkernels.testing.flower_sim`` (each virtual node generates only its own shard),
run through Flower's simulation engine (Ray backend, one worker per core) with
``flwr.simulation.run_simulation``, the Python entry point of the engine ``flwr run`` uses for a
local simulation. Every run's final state is checked bit-identical to the in-process run.

    PYTHONPATH=src python -m bench.fl.flower_sim                        # 10, 100, 1000 clients
    PYTHONPATH=src python -m bench.fl.flower_sim --clients 1000 --rounds 4
    PYTHONPATH=src python -m bench.fl.flower_sim --quick                # 10 clients, 2 rounds

Columns: discovery (seconds before round 1: Ray workers start, each node is asked who it is once),
round 1 (first round: workers' first training), later rounds (mean seconds per round after the
first), per client (the fastest later round's seconds / clients per round) beside the in-process
loop's (the same, on one torch thread as each simulation worker), their ratio, the CPU seconds of the whole process tree
(Ray's workers included) and its peak resident memory (sampled, :mod:`proctree`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import load_note, markdown_table, results_path, write_results
from bench.fl.proctree import TreeMonitor

COLUMNS = [
    "clients",
    "per round",
    "rounds",
    "discovery s",
    "round 1 s",
    "later rounds s",
    "flower s/client",
    "in-process s/client",
    "ratio",
    "tree CPU s",
    "peak RSS MiB",
    "equal",
]


def backend(workers: int) -> dict:
    """Flower's Ray backend: ``workers`` ClientApp workers of one CPU each, no dashboard."""
    return {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {
            "num_cpus": workers,
            "include_dashboard": False,
            "logging_level": "ERROR",
            "log_to_driver": False,
        },
    }


def later_mean(seconds: list[float]) -> float:
    """Mean seconds of the rounds after the first (the first if there is only one)."""
    return statistics.fmean(seconds[1:] if len(seconds) > 1 else seconds)


def later_min(seconds: list[float]) -> float:
    """The fastest round after the first (the least disturbed by other work on a shared machine)."""
    return min(seconds[1:] if len(seconds) > 1 else seconds)


def one(s, workers: int) -> dict:
    import torch
    from flwr.simulation import run_simulation

    from fedkernels.fl.checkpoint import load_checkpoint
    from fedkernels.testing.flower_sim import apps, in_process_run

    with tempfile.TemporaryDirectory(prefix="fk-flower-sim-") as tmp:
        s = dataclasses.replace(s, checkpoint=f"{tmp}/run.ckpt", result=f"{tmp}/result.json")
        server, client = apps(s)
        t0 = time.perf_counter()
        with TreeMonitor() as mon:
            run_simulation(server, client, num_supernodes=s.num_clients, backend_config=backend(workers))
        wall = time.perf_counter() - t0
        out = json.loads(Path(s.result).read_text())
        ref = in_process_run(s)
        state, _meta = load_checkpoint(s.checkpoint, ref.state)
    equal = all(torch.equal(state[k], ref.state[k]) for k in ref.state)
    flower_rounds = [r["seconds"] for r in out["rounds"]]
    ref_rounds = [h.seconds for h in ref.history]
    per = s.clients_per_round
    return {
        "clients": s.num_clients,
        "per round": per,
        "rounds": s.rounds,
        "discovery s": out["discovery_seconds"],
        "round 1 s": flower_rounds[0],
        "later rounds s": later_mean(flower_rounds),
        "flower s/client": later_min(flower_rounds) / per,
        "in-process s/client": later_min(ref_rounds) / per,
        "ratio": later_min(flower_rounds) / later_min(ref_rounds),
        "tree CPU s": mon.cpu_seconds,
        "peak RSS MiB": mon.peak_rss_bytes / 2**20,
        "equal": "yes" if equal else "NO",
        "wall s": wall,
        "completed rounds": len(flower_rounds),
        "failed": out["failed"],
        "flower round seconds": flower_rounds,
        "in-process round seconds": ref_rounds,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[10, 100, 1000])
    p.add_argument("--per-round", type=int, default=100, help="clients per round (at most the clients)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="simulation workers (one CPU each)")
    p.add_argument("--examples", type=int, default=64, help="rows per client")
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--classes", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--strategy", default="fedavg")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per message")
    p.add_argument(
        "--max-in-flight", type=int, default=4, help="messages out at once (0: all; a few per worker is best here)"
    )
    p.add_argument("--out", type=Path, default=None, help="result JSON (default: build/bench-results/flower_sim.json)")
    p.add_argument("--quick", action="store_true", help="smoke run: 10 clients, 2 rounds")
    args = p.parse_args()
    if args.quick:
        p.set_defaults(clients=[10], rounds=2)
        args = p.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    from fedkernels.testing.flower_sim import Settings

    rows = []
    for n in args.clients:
        s = Settings(
            strategy=args.strategy,
            num_clients=n,
            clients_per_round=min(args.per_round, n),
            rounds=args.rounds,
            examples=args.examples,
            num_features=args.features,
            num_classes=args.classes,
            hidden=args.hidden,
            epochs=args.epochs,
            timeout=args.timeout,
            max_in_flight=args.max_in_flight,
        )
        rows.append(one(s, args.workers))
        print(markdown_table(rows[-1:], COLUMNS), flush=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    print("\n" + markdown_table(rows, COLUMNS))
    note = load_note()
    print(note)
    path = write_results(
        "flower_sim", rows, {"settings": settings, "note": note}, path=results_path("flower_sim", out=args.out)
    )
    print(f"wrote {path}")
    return 0 if all(r["equal"] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
