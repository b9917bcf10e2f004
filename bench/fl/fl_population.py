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

``--mode``: how the rounds run. ``inprocess``: the embedded server. ``flower-cohort``: Flower's
simulation engine (Ray, ``--workers`` workers of one CPU) with ``--nodes`` cohort nodes, each serving a
block of the population from the same store (``cohort_client_app`` over a
:class:`fedkernels.integrations.flower.StoreLoader`, its cache bounded at the round's clients), the same
rows; each row also runs the in-process batched loop over the same store and seed in the same child
(one torch thread, as each Ray worker) and reports both per-client times (the fastest measured round
over its clients: the least disturbed by other work on a shared machine; medians and every round's
seconds are kept too), their ratio and whether the final states are equal (bit-identical, else the max
abs difference). Peak memory per node process: each Ray worker's VmHWM after every message it served
(read in the ClientApp by a mod), the largest of them, and the ServerApp process's. CPU: the whole
machine's busy CPU seconds in a measured round (``/proc/stat``, every process: server, nodes, Ray),
median, for both runs: a round on ``cores`` cores takes at least the cohort run's over ``cores``
(meaningful on a quiet machine only; the load note says).

    PYTHONPATH=src python -m bench.fl.fl_population --out bench/results/fl/fl_population.json
    PYTHONPATH=src python -m bench.fl.fl_population --quick     # 10^3 clients, 2 rounds: a smoke run
    PYTHONPATH=src python -m bench.fl.fl_population --mode flower-cohort --nodes 2 4 \
        --out bench/results/fl/fl_population_flower.json --append   # rows added to the file

Every row names the code it measured (``commit``: ``git describe --always --dirty``; rows without one
predate the field), so rows appended after a change stand apart from the rows before it.
"""

from __future__ import annotations

import argparse
import itertools
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
MODES = ("inprocess", "flower-cohort")


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy since boot (``/proc/stat``: user, nice,
    system, irq, softirq, steal), every process counted: Ray's workers and raylet too."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


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


def _strategy_and_train(kind: str):
    from fedkernels.fl import FedAvg, FedAwS, TrainConfig

    strategy = FedAvg(hidden=(256,), loss="bce") if kind == "stackex" else FedAwS(dim=32, hidden=(32,), spread_steps=0)
    return strategy, TrainConfig(epochs=1, batch_size=32, lr=0.1, optimizer="sgd")


def _node_memory_mod(out_dir: str, loader):
    """A ClientApp mod writing this worker process's peak and current RSS, the nodes it served, the
    messages and the clients read for them, after every message (one file per process, accumulated:
    Flower's Ray backend may rebuild the ClientApp, and so the loader, for each message)."""

    def mod(message, context, call_next):
        before = loader.loads
        reply = call_next(message, context)
        path = Path(out_dir, f"{os.getpid()}.json")
        info = json.loads(path.read_text()) if path.exists() else {"pid": os.getpid(), "nodes": [], "messages": 0}
        info["nodes"] = sorted({*info["nodes"], int(context.node_id)})
        info["messages"] += 1
        info["clients_read"] = info.get("clients_read", 0) + loader.loads - before
        info.update(vmhwm_mib=_rss_kib("VmHWM") / 1024, vmrss_mib=_rss_kib("VmRSS") / 1024)
        path.write_text(json.dumps(info))
        return reply

    return mod


def run_flower_one(args: argparse.Namespace) -> dict:
    """One row on Flower's simulation engine with cohort nodes over the store, and the in-process
    batched loop over the same store and seed (for time and equality), in this process."""
    import dataclasses
    import logging
    import tempfile

    from flwr.simulation import run_simulation

    from bench.fl.flower_sim import backend
    from fedkernels.data.client_store import ClientStore
    from fedkernels.fl import RunConfig, Server
    from fedkernels.integrations.flower import CohortFlowerStrategy, StoreLoader, cohort_client_app, server_app

    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    store = ClientStore(args.store, max_resident=0)
    F, C, N, k = store.num_features, store.num_classes, len(store), args.per_round
    _, train = _strategy_and_train(args.kind)
    n_rounds = args.rounds + 1  # the first is a warm-up, reported apart
    cfg = RunConfig(rounds=n_rounds, clients_per_round=k, train=train, batch_clients=True, client_timeout=600.0)
    with tempfile.TemporaryDirectory(prefix="fk-population-flower-") as tmp:
        loader = StoreLoader(args.store)
        client = cohort_client_app(
            lambda ctx: _strategy_and_train(args.kind)[0], loader, cache_clients=k,
            mods=[_node_memory_mod(tmp, loader)],
        )  # fmt: skip
        done = Path(tmp, "server.pt")

        class BusyMarked(CohortFlowerStrategy):
            """The machine's busy CPU seconds at the end of every round (after its aggregation)."""

            def aggregate_train(self, server_round, replies):
                out = super().aggregate_train(server_round, replies)
                self.busy = [*getattr(self, "busy", []), _machine_busy_s()]
                return out

        def on_done(ctx, fk) -> None:
            rounds = [h.seconds for h in fk.history]
            failed = sum(len(h.failed) for h in fk.history)
            info = {"rounds": rounds, "failed": failed, "discovery_s": fk.discovery_seconds, "busy": fk.busy}
            info["messages"] = dict(fk.messages_sent)
            info["server_vmhwm_mib"] = _rss_kib("VmHWM") / 1024
            torch.save({"state": fk.state, "info": info}, done)

        server = server_app(
            lambda ctx: BusyMarked(_strategy_and_train(args.kind)[0], F, C, N, cfg, startup_grace=600.0),
            on_done=on_done,
        )
        w = time.perf_counter()
        run_simulation(server, client, num_supernodes=args.nodes, backend_config=backend(args.workers))
        wall = time.perf_counter() - w
        got = torch.load(done, weights_only=False)
        workers = [json.loads(p.read_text()) for p in Path(tmp).glob("*.json")]
    # the in-process batched loop over the same store and seed (no per-call deadline, as in process)
    ref_cfg = dataclasses.replace(cfg, client_timeout=None)
    ref = Server(_strategy_and_train(args.kind)[0], ClientStore(args.store, max_resident=k), F, C, ref_cfg)
    ref_rounds, ref_busy = [], []
    for _ in range(n_rounds):
        busy = _machine_busy_s()
        ref_rounds.append(ref.run_round().seconds)
        ref_busy.append(_machine_busy_s() - busy)
    state, want = got["state"], ref.state
    equal = all(state[n].dtype == want[n].dtype and torch.equal(state[n], want[n]) for n in want)
    diff = max(float((state[n].double() - want[n].double()).abs().max()) if want[n].numel() else 0.0 for n in want)
    info = got["info"]
    # the fastest measured round of each (the least disturbed by other work on the shared machine)
    flower_s, ref_s = min(info["rounds"][1:]), min(ref_rounds[1:])
    return {
        "nodes": args.nodes,
        "workers": args.workers,
        "per_client_ms": 1e3 * flower_s / k,
        "inprocess_per_client_ms": 1e3 * ref_s / k,
        "ratio": flower_s / ref_s,
        "round_s_min": flower_s,
        "round_s_median": statistics.median(info["rounds"][1:]),
        "round_s_warmup": info["rounds"][0],
        "inprocess_round_s_min": ref_s,
        "inprocess_round_s_median": statistics.median(ref_rounds[1:]),
        "round_s": info["rounds"],
        "inprocess_round_s": ref_rounds,
        # the whole machine's busy CPU seconds in a measured round (median): what the cohort run costs in
        # CPU, every process counted, against the in-process loop's; on this many cores a round cannot
        # take less than the first over the second
        "machine_cpu_s_per_round": statistics.median(b - a for a, b in itertools.pairwise(info["busy"])),
        "inprocess_machine_cpu_s_per_round": statistics.median(ref_busy[1:]),
        "cores": os.cpu_count(),
        "discovery_s": info["discovery_s"],
        "simulation_wall_s": wall,
        "equal": "bit-identical" if equal else "differs",
        "max_abs_diff": diff,
        "node_process_peak_rss_mib": max(wk["vmhwm_mib"] for wk in workers),
        "node_processes": sorted(
            (
                {
                    "nodes": wk["nodes"],
                    "messages": wk["messages"],
                    "peak_rss_mib": wk["vmhwm_mib"],
                    "clients_read": wk["clients_read"],
                }
                for wk in workers
            ),
            key=lambda wk: wk["nodes"],
        ),
        "server_process_peak_rss_mib": info["server_vmhwm_mib"],
        "failed_clients": info["failed"],
        "messages": info["messages"],
    }


def _commit() -> str:
    """The measured code: ``git describe --always --dirty`` of the checkout ("unknown" outside git)."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _child(
    store: Path, kind: str, per_round: int, rounds: int, eager: bool, mode: str, nodes: int, workers: int
) -> dict:
    cmd = [sys.executable, "-m", "bench.fl.fl_population", "--one", str(store), "--kind", kind, "--mode", mode]
    cmd += ["--per-round-one", str(per_round), "--rounds", str(rounds)] + (["--eager-one"] if eager else [])
    cmd += ["--nodes-one", str(nodes), "--workers", str(workers)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=MODES, default="inprocess")
    ap.add_argument("--nodes", type=int, nargs="+", default=[2, 4], help="flower-cohort: cohort nodes")
    ap.add_argument("--workers", type=int, default=2, help="flower-cohort: simulation workers (one CPU each)")
    ap.add_argument("--append", action="store_true", help="add the rows to those already in --out")
    ap.add_argument("--populations", type=int, nargs="*", default=[1000, 10_000, 100_000])
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
    ap.add_argument("--nodes-one", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        args.store, args.per_round, args.nodes = args.one, args.per_round_one, args.nodes_one
        print(json.dumps(run_flower_one(args) if args.mode == "flower-cohort" else run_one(args)))
        return
    if args.quick:
        args.populations, args.per_round, args.rounds, args.eager = [1000], [100], 2, [1000]
    path_out = results_path("fl_population", out=args.out, quick=args.quick)
    old = json.loads(path_out.read_text()) if args.append and path_out.exists() else {}
    rows = old.get("rows", [])
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
    flower = args.mode == "flower-cohort"
    commit = _commit()
    # --append keeps the file's own notes (this run's keys replace theirs)
    extra = {k: v for k, v in old.items() if k not in ("benchmark", "machine", "rows")}
    extra |= {
        "threads": 1,
        "features": args.features,
        "setting": "FedAwS one label per client, p = 100000, MLP F-32-32, 1 epoch SGD batch 32, batched pass; "
        "stackex: FedAvg MLP 577-256-400",
    }
    for kind, n, path, write_s in jobs:
        per_round = [k for k in ([50, 100] if kind == "stackex" else args.per_round) if k <= n]
        for k in per_round:
            eagers = (False, True) if (not flower and n in args.eager and k == per_round[0]) else (False,)
            for eager, nodes in [(e, m) for e in eagers for m in (args.nodes if flower else [0])]:
                row = {
                    "mode": args.mode,
                    "data": kind,
                    "clients": n,
                    "per_round": k,
                    "rounds": args.rounds,
                    "loop": "eager list" if eager else "store",
                    "store_write_s": write_s,
                    "commit": commit,
                }
                row.update(_child(path, kind, k, args.rounds, eager, args.mode, nodes, args.workers))
                rows.append(row)
                print(
                    markdown_table(rows[-1:], [c for c in rows[-1] if c not in ("node_processes", "messages")]),
                    flush=True,
                )
                # written after every row: a long sweep keeps what it measured
                extra["note"] = load_note(os.getloadavg())
                write_results("fl_population", rows, extra, path_out)
    shutil.rmtree(args.work, ignore_errors=True)
    print(f"\n{extra.get('note', '')}\nwrote {path_out}")


if __name__ == "__main__":
    main()
