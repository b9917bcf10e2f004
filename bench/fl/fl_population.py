"""Scaling the population: 10^3 to 10^5 simulated clients served lazily from a ClientStore.

Each population is written once by :func:`fedkernels.data.xc_population.write_xc_population`
(power-law labels at p = 10^5, one label per client so FedAwS applies; clients of ``1 + Poisson(7)``
examples, 16 feature draws each over ``--features`` columns) into a store under ``--work``, then every
(population, clients a round) pair runs in its own process (so its peak RSS is its own): the in-process
server over the store, a warm-up round and ``--rounds`` measured rounds of FedAwS (MLP ``F -> 32 -> 32``,
no server spreadout step: ``spread_steps=0`` keeps the server's side out of the per-client time), 1 epoch
of SGD, batch 32, ``batch_clients=True`` (the batched pass).

Per row: seconds to write the store and for the server's setup; the median measured round and its
clients' part (``InProcessTransport.updates``) per client; peak RSS (VmHWM) and the RSS after setup; the
resident clients at the end (``StoreClients.num_resident``) and how many clients were ever
materialised; the median time to read one client from the store. ``--eager`` adds rows that first read
the whole population into a list (the loop's old way) for the memory it costs.

``--stackex``: stackex_cooking's real clients (the fedss-stackex preset's partition: primary label,
clients of 4 questions, about 2,200 clients) written to a store, FedAvg MLP 577-256-400 (FedSS, the
preset's algorithm, has no batched pass), 50 and 100 clients a round.

``--mode``: how the rounds run. ``inprocess`` (the only one so far): the embedded server. A Flower
cohort-node mode (one SuperNode per shard of the population) belongs here as another value, with the
same rows so the two compare directly.

    PYTHONPATH=src python -m bench.fl.fl_population --out bench/results/fl/fl_population.json
    PYTHONPATH=src python -m bench.fl.fl_population --quick     # 10^3 clients, 2 rounds: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from bench.common import load_note, markdown_table, results_path, write_results

ROOT = Path(__file__).resolve().parents[2]
STACKEX = ROOT / ".." / "shared" / "data" / "stackex_cooking"
MODES = ("inprocess",)


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _write_synthetic(path: Path, num_clients: int, features: int) -> float:
    from fedkernels.data.xc_population import PopulationSpec, write_xc_population

    t = time.perf_counter()
    write_xc_population(path, PopulationSpec(num_clients=num_clients, num_features=features, one_label=True))
    return time.perf_counter() - t


def _write_stackex(path: Path) -> float:
    from fedkernels.data.client_store import write_client_store
    from fedkernels.experiments.experiment import ExperimentConfig, prepare_data

    cfg = ExperimentConfig(dataset=str(STACKEX), partition="primary_label", client_size=4, seed=0)
    data = prepare_data(cfg)
    t = time.perf_counter()
    write_client_store(path, data.clients)
    return time.perf_counter() - t


def run_one(args: argparse.Namespace) -> dict:
    """One (population, clients a round) row, in this process."""
    from fedkernels.data.client_store import ClientStore
    from fedkernels.fl import FedAvg, FedAwS, RunConfig, Server, TrainConfig
    from fedkernels.fl.server import InProcessTransport

    torch.set_num_threads(1)
    store = ClientStore(args.store, max_resident=args.per_round)
    clients = list(store) if args.eager_one else store  # eager: the whole population read into a list first
    if args.kind == "stackex":
        strategy = FedAvg(hidden=(256,), loss="bce")
    else:
        strategy = FedAwS(dim=32, hidden=(32,), spread_steps=0)
    train = TrainConfig(epochs=1, batch_size=32, lr=0.1, optimizer="sgd")
    cfg = RunConfig(rounds=args.rounds, clients_per_round=args.per_round, train=train, batch_clients=True)
    t = time.perf_counter()
    server = Server(strategy, clients, store.num_features, store.num_classes, cfg)
    setup_s = time.perf_counter() - t
    rss_setup = _rss_kib("VmRSS")
    part = {"s": 0.0}
    real = InProcessTransport.updates

    def timed(self, *a, **k):
        w = time.perf_counter()
        try:
            return real(self, *a, **k)
        finally:
            part["s"] += time.perf_counter() - w

    InProcessTransport.updates = timed
    rounds, client_parts, failed = [], [], 0
    try:
        for _ in range(args.rounds + 1):  # the first is a warm-up (first-touch allocations), reported apart
            part["s"] = 0.0
            w = time.perf_counter()
            rec = server.run_round()
            rounds.append(time.perf_counter() - w)
            client_parts.append(part["s"])
            failed += len(rec.failed)
    finally:
        InProcessTransport.updates = real
    lc = server.local_clients
    # what serving a client from the store costs (read, checks, tensors): seeded random clients, median
    ids = torch.randint(0, len(store), (200,), generator=torch.Generator().manual_seed(0)).tolist()
    loads = []
    for c in ids:
        w = time.perf_counter()
        store.load(c)
        loads.append(time.perf_counter() - w)
    return {
        "store_load_ms_per_client": 1e3 * statistics.median(loads),
        "setup_s": setup_s,
        "round_s_median": statistics.median(rounds[1:]),
        "round_s_warmup": rounds[0],
        "per_client_ms": 1e3 * statistics.median(rounds[1:]) / args.per_round,
        "clients_part_per_client_ms": 1e3 * statistics.median(client_parts[1:]) / args.per_round,
        "peak_rss_mib": _rss_kib("VmHWM") / 1024,
        "rss_after_setup_mib": rss_setup / 1024,
        "resident_clients": getattr(lc, "num_resident", len(lc)),
        "clients_materialised": getattr(lc, "made", len(lc)),
        "failed_clients": failed,
    }


def _child(store: Path, kind: str, per_round: int, rounds: int, eager: bool) -> dict:
    cmd = [sys.executable, "-m", "bench.fl.fl_population", "--one", str(store), "--kind", kind]
    cmd += ["--per-round-one", str(per_round), "--rounds", str(rounds)] + (["--eager-one"] if eager else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=MODES, default="inprocess")
    ap.add_argument("--populations", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--per-round", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--features", type=int, default=2048)
    ap.add_argument(
        "--eager",
        type=int,
        nargs="*",
        default=[10_000, 100_000],
        help="populations that also get an eager-list row (at the smallest clients a round)",
    )
    ap.add_argument("--stackex", action="store_true", help="add stackex_cooking's real clients")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "bench-population")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    # a child's arguments (one row in a fresh process)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--kind", default="synthetic", help=argparse.SUPPRESS)
    ap.add_argument("--per-round-one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--eager-one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        args.store, args.per_round = args.one, args.per_round_one
        print(json.dumps(run_one(args)))
        return
    if args.quick:
        args.populations, args.per_round, args.rounds, args.eager = [1000], [100], 2, [1000]
    rows = []
    shutil.rmtree(args.work, ignore_errors=True)
    jobs: list[tuple[str, int, Path, float]] = []
    for n in args.populations:
        path = args.work / f"synthetic-{n}"
        jobs.append(("synthetic", n, path, _write_synthetic(path, n, args.features)))
    if args.stackex:
        if not STACKEX.exists():
            sys.exit(f"--stackex: {STACKEX} is absent")
        path = args.work / "stackex"
        write_s = _write_stackex(path)
        from fedkernels.data.client_store import ClientStore

        jobs.append(("stackex", len(ClientStore(path)), path, write_s))
    for kind, n, path, write_s in jobs:
        per_round = [k for k in ([50, 100] if kind == "stackex" else args.per_round) if k <= n]
        for k in per_round:
            for eager in (False, True) if (n in args.eager and k == per_round[0]) else (False,):
                row = {
                    "mode": args.mode,
                    "data": kind,
                    "clients": n,
                    "per_round": k,
                    "rounds": args.rounds,
                    "loop": "eager list" if eager else "store",
                    "store_write_s": write_s,
                }
                row.update(_child(path, kind, k, args.rounds, eager))
                rows.append(row)
                print(markdown_table(rows[-1:], list(rows[-1])), flush=True)
    note = load_note(os.getloadavg())
    extra = {
        "note": note,
        "threads": 1,
        "features": args.features,
        "setting": "FedAwS one label per client, p = 100000, MLP F-32-32, 1 epoch SGD batch 32, batched pass; "
        "stackex: FedAvg MLP 577-256-400",
    }
    path = write_results("fl_population", rows, extra, results_path("fl_population", out=args.out, quick=args.quick))
    shutil.rmtree(args.work, ignore_errors=True)
    print(f"\n{note}\nwrote {path}")


if __name__ == "__main__":
    main()
