"""Cohort nodes on Flower's simulation engine against the in-process batched loop: 1000 clients, 100 a
round, served by 2 or 4 virtual SuperNodes (each a shard of the clients, one message per node and
round, its cohort trained in one batched pass), per-client seconds beside the in-process batched
loop's on the same shards in the same run, and the final state checked equal.

The workload is bench/fl/flower_sim.py's (FedAvg, MLP 256-64-64, 64-80 rows a client, 2 local epochs;
each node generates only the shards of the clients it trains), so its rows (one node per client) compare.

    PYTHONPATH=src:. python -m bench.fl.flower_cohort --nodes 2 4
    PYTHONPATH=src:. python -m bench.fl.flower_cohort --quick            # 40 clients, 2 nodes, 2 rounds
    PYTHONPATH=src:. python -m bench.fl.flower_cohort --nodes 2 --clients 100000 --examples 16 \
        --features 16 --classes 8 --hidden 8 --epochs 1          # 10^5 clients, a tiny model

Columns: nodes, discovery (seconds before round 1: Ray's workers start, one identify per node), round 1,
per client (the fastest round after the first / clients per round) for the cohort run and the in-process
batched loop (one torch thread, as each simulation worker), their ratio, the process tree's CPU seconds
and peak resident memory (Ray's included), and whether the states are bit-identical.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

from bench.common import load_note, markdown_table, results_path, write_results
from bench.fl.flower_sim import backend, later_min
from bench.fl.proctree import TreeMonitor

COLUMNS = [
    "clients",
    "per round",
    "nodes",
    "rounds",
    "discovery s",
    "round 1 s",
    "cohort s/client",
    "in-process batched s/client",
    "ratio",
    "tree CPU s",
    "peak RSS MiB",
    "equal",
]


def one(s, nodes: int, workers: int) -> dict:
    import torch
    from flwr.simulation import run_simulation

    from fedkernels.fl.checkpoint import load_checkpoint
    from fedkernels.testing.flower_sim import apps, in_process_run

    with tempfile.TemporaryDirectory(prefix="fk-flower-cohort-") as tmp:
        s = dataclasses.replace(s, checkpoint=f"{tmp}/run.ckpt", result=f"{tmp}/result.json")
        server, client = apps(s)
        t0 = time.perf_counter()
        with TreeMonitor() as mon:
            run_simulation(server, client, num_supernodes=nodes, backend_config=backend(workers))
        wall = time.perf_counter() - t0
        out = json.loads(Path(s.result).read_text())
        ref = in_process_run(s)
        state, _meta = load_checkpoint(s.checkpoint, ref.state)
    equal = all(torch.equal(state[k], ref.state[k]) for k in ref.state)
    close = all(torch.allclose(state[k].float(), ref.state[k].float(), rtol=1e-5, atol=1e-6) for k in ref.state)
    cohort_rounds = [r["seconds"] for r in out["rounds"]]
    ref_rounds = [h.seconds for h in ref.history]
    per = s.clients_per_round
    return {
        "clients": s.num_clients,
        "per round": per,
        "nodes": nodes,
        "rounds": s.rounds,
        "discovery s": out["discovery_seconds"],
        "round 1 s": cohort_rounds[0],
        "cohort s/client": later_min(cohort_rounds) / per,
        "in-process batched s/client": later_min(ref_rounds) / per,
        "ratio": later_min(cohort_rounds) / later_min(ref_rounds),
        "tree CPU s": mon.cpu_seconds,
        "peak RSS MiB": mon.peak_rss_bytes / 2**20,
        "equal": "yes" if equal else ("within rounding" if close else "NO"),
        "wall s": wall,
        "failed": out["failed"],
        "messages": out["messages"],
        "cohort round seconds": cohort_rounds,
        "in-process round seconds": ref_rounds,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--per-round", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2, help="simulation workers (one CPU each)")
    p.add_argument("--examples", type=int, default=64, help="rows per client")
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--classes", type=int, default=64)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per node message")
    p.add_argument("--out", type=Path, default=None, help="result JSON (default: build/bench-results/)")
    p.add_argument("--append", action="store_true", help="add the rows to those already in --out")
    p.add_argument("--quick", action="store_true", help="smoke run: 40 clients, 2 nodes, 2 rounds")
    args = p.parse_args()
    if args.quick:
        args.clients, args.per_round, args.nodes, args.rounds = 40, 16, [2], 2
    logging.getLogger("flwr").setLevel(logging.WARNING)
    from fedkernels.testing.flower_sim import Settings

    s = Settings(
        num_clients=args.clients,
        clients_per_round=min(args.per_round, args.clients),
        rounds=args.rounds,
        examples=args.examples,
        num_features=args.features,
        num_classes=args.classes,
        hidden=args.hidden,
        epochs=args.epochs,
        timeout=args.timeout,
        cohort=True,
        batch_clients=True,
    )
    path = results_path("flower_cohort", out=args.out, quick=args.quick)
    rows = json.loads(path.read_text())["rows"] if args.append and path.exists() else []
    for nodes in args.nodes:
        rows.append(one(s, nodes, args.workers))
        print(markdown_table(rows[-1:], COLUMNS), flush=True)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    note = load_note()
    print("\n" + markdown_table(rows, COLUMNS) + "\n" + note)
    write_results("flower_cohort", rows, {"settings": settings, "note": note}, path=path)
    print(f"wrote {path}")
    return 0 if all(r["equal"] != "NO" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
