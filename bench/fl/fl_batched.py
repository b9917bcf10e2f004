"""A round's clients trained in one batched pass (fedkernels.fl.batched) against the per-client loop.

The same server alternates rounds with ``RunConfig.batch_clients`` on and off, so both modes see the
same model sizes and the same machine load; each mode's row is its fastest round (wall and process CPU
time), for the whole round and for the clients' part alone (``InProcessTransport.updates``: decoding
the downloads, local training, encoding the uploads). The server's side (download encoding, upload
checks, aggregation) is the same code in both modes.

Cases: ``fedaws`` is the FedAwS/FedALC preset's round on Bibtex at full participation (159 one-label
clients, MLP 1836-256-64, 2 epochs of SGD, batch 32: the Gram form), ``fedavg-adam`` a FedAvg round
of the partial-exchange preset shape under Adam (the dense ``vmap`` pass, 10 Dirichlet clients),
``fedavg-dpsgd`` FedAvg with sample-level DP-SGD (per-example gradients: one backward pass per example
in the per-client loop, one ``vmap`` over clients and rows in the batched pass; 20 Dirichlet clients,
MLP 1836-64-159, 1 epoch SGD, batch 32, clip 1, noise 1).

``--device cuda`` runs the loop on a GPU (the batched pass trains there too) and ``--autocast bf16``
both modes under bfloat16 autocast. The in-process transport takes the batched pass for DP-SGD rounds
off the host only (on the CPU the loop's per-example backward passes cost less), so ``fedavg-dpsgd``
compares the two modes with ``--device cuda``; on the CPU both of its rows are the sequential loop.

    PYTHONPATH=src python -m bench.fl.fl_batched --out bench/results/fl/fl_batched.json
    PYTHONPATH=src python -m bench.fl.fl_batched --quick          # one round each, smoke
    PYTHONPATH=src python -m bench.fl.fl_batched --device cuda --cases fedaws fedavg-dpsgd
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import torch

from bench.common import load_note, markdown_table, results_path, write_results
from fedkernels.experiments.experiment import ExperimentConfig, prepare_data
from fedkernels.fl import FedAvg, FedAwS, RunConfig, Server, TrainConfig
from fedkernels.fl.server import InProcessTransport

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "bibtex"


def case(name: str, device: str = "cpu", autocast: str = "off") -> tuple[Server, str]:
    if name == "fedaws":
        cfg = ExperimentConfig(dataset=str(DATA), partition="one_label", l2_normalize=False)
        data = prepare_data(cfg)
        strategy = FedAwS(dim=64, hidden=(256,), margin=1.414, spread_lr=0.5)
        train = TrainConfig(epochs=2, batch_size=32, lr=0.1, optimizer="sgd")
        per_round = len(data.clients)
        what = "FedAwS, Bibtex one label per client, 159 of 159 clients, MLP 1836-256-64, 2 epochs SGD, batch 32"
    elif name == "fedavg-dpsgd":
        cfg = ExperimentConfig(dataset=str(DATA), partition="dirichlet", beta=0.5, clients=20)
        data = prepare_data(cfg)
        strategy = FedAvg(hidden=(64,), loss="bce")
        train = TrainConfig(epochs=1, batch_size=32, lr=0.1, optimizer="sgd", dp_sample_clip=1.0, dp_sample_noise=1.0)
        per_round = 20
        what = "FedAvg with DP-SGD, Bibtex Dirichlet(0.5), 20 of 20 clients, MLP 1836-64-159, 1 epoch SGD, batch 32"
    else:
        cfg = ExperimentConfig(dataset=str(DATA), partition="dirichlet", beta=0.5, clients=10)
        data = prepare_data(cfg)
        strategy = FedAvg(hidden=(256, 256, 256), loss="bce")
        train = TrainConfig(epochs=2, batch_size=64, lr=0.001, optimizer="adam")
        per_round = 10
        what = "FedAvg, Bibtex Dirichlet(0.5), 10 of 10 clients, MLP 1836-256-256-256-159, 2 epochs Adam, batch 64"
    train = dataclasses.replace(train, autocast=autocast)
    run = RunConfig(rounds=10**6, clients_per_round=per_round, train=train, device=device)
    ds = data.dataset
    return Server(strategy, data.clients, ds.num_features, ds.num_classes, run), what


def measure(server: Server, rounds: int) -> dict[bool, dict[str, float]]:
    """Fastest round per mode (alternating), whole round and the clients' part, wall and CPU."""
    clients = {"wall": 0.0, "cpu": 0.0}
    real = InProcessTransport.updates

    def timed(self, *a, **k):
        w, c = time.perf_counter(), time.process_time()
        try:
            return real(self, *a, **k)
        finally:
            if torch.cuda.is_available():  # the clients' kernels finished, not just queued
                torch.cuda.synchronize()
            clients["wall"] += time.perf_counter() - w
            clients["cpu"] += time.process_time() - c

    InProcessTransport.updates = timed
    best: dict[bool, dict[str, float]] = {}
    try:
        server.config.batch_clients = True
        server.run_round()  # warm-up (first-touch allocations, the Gram-form feature views)
        for _ in range(rounds):
            for batch in (True, False):
                server.config.batch_clients = batch
                clients.update(wall=0.0, cpu=0.0)
                w, c = time.perf_counter(), time.process_time()
                server.run_round()
                row = {
                    "round_wall_s": time.perf_counter() - w,
                    "round_cpu_s": time.process_time() - c,
                    "clients_wall_s": clients["wall"],
                    "clients_cpu_s": clients["cpu"],
                }
                old = best.setdefault(batch, row)
                best[batch] = {k: min(old[k], row[k]) for k in row}
    finally:
        InProcessTransport.updates = real
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["fedaws", "fedavg-adam"])
    ap.add_argument("--rounds", type=int, default=3, help="rounds per mode (alternating); the fastest is kept")
    ap.add_argument("--quick", action="store_true", help="one round per mode")
    ap.add_argument("--device", default="cpu", help="the loop's device (RunConfig.device): cpu, cuda, cuda:N")
    ap.add_argument("--autocast", default="off", choices=["off", "bf16"], help="TrainConfig.autocast of both modes")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.cases:
        server, what = case(name, args.device, args.autocast)
        best = measure(server, 1 if args.quick else args.rounds)
        b, s = best[True], best[False]
        rows.append(
            {
                "case": name,
                "setting": what,
                "device": args.device,
                "autocast": args.autocast,
                **{f"batched_{k}": v for k, v in b.items()},
                **{f"sequential_{k}": v for k, v in s.items()},
                "round_speedup_wall": s["round_wall_s"] / b["round_wall_s"],
                "round_speedup_cpu": s["round_cpu_s"] / b["round_cpu_s"],
                "clients_speedup_wall": s["clients_wall_s"] / b["clients_wall_s"],
                "clients_speedup_cpu": s["clients_cpu_s"] / b["clients_cpu_s"],
            }
        )
        print(markdown_table(rows[-1:], list(rows[-1])), flush=True)
    note = load_note(os.getloadavg())
    path = write_results(
        "fl_batched", rows, {"note": note, "threads": 1}, results_path("fl_batched", out=args.out, quick=args.quick)
    )
    print(f"\n{note}\nwrote {path}")


if __name__ == "__main__":
    main()
