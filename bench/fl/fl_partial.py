"""Partial weight exchange in the federated loop on real data: P@k and upload bytes over
the exchange fraction p and the Dirichlet label-skew beta.

Data: ../shared/data/<dataset>/{train,test}.txt (Extreme Classification format, read here; never
copied). Partition: each training sample is assigned by its first label; each class's samples are
split over the clients by Dirichlet(beta) proportions (samples without labels: uniformly).
Run: ``PYTHONPATH=src python -m bench.fl.fl_partial`` (writes build/bench-results/fl_partial.json; the committed
table: ``--out bench/results/fl/fl_partial.json``). ``--quick``: one beta, p 0.25 and 1, 2 rounds, a tiny model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import load_note, read_xc_dense, results_path
from fedkernels.fl import FedAvg, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import PartialExchange
from fedkernels.fl.seeding import numpy_rng
from fedkernels.fl.types import ClientData

DATA = Path(
    os.environ.get("FEDKERNELS_DATA_DIR")
    or os.environ.get("FEDKERNELS_DATA")  # the deprecated name
    or Path(__file__).resolve().parents[3] / "shared" / "data"
)


read_xc = read_xc_dense  # the library's XC reader, dense features


def dirichlet_split(data: ClientData, num_clients: int, beta: float, seed: int) -> list[ClientData]:
    """Label skew: per first label, Dirichlet(beta) shares of its samples to each client."""
    rng = numpy_rng(seed, "dirichlet", beta)
    lens = data.indptr.diff().numpy()
    first = np.where(lens > 0, data.indices.numpy()[np.minimum(data.indptr[:-1].numpy(), len(data.indices) - 1)], -1)
    owner = np.empty(len(data), dtype=np.int64)
    for c in np.unique(first):
        rows = np.flatnonzero(first == c)
        rng.shuffle(rows)
        if c < 0:
            owner[rows] = rng.integers(0, num_clients, len(rows))
            continue
        cuts = (np.cumsum(rng.dirichlet(np.full(num_clients, beta))) * len(rows)).astype(np.int64)[:-1]
        for k, part in enumerate(np.split(rows, cuts)):
            owner[part] = k
    return [data.rows(torch.from_numpy(np.flatnonzero(owner == k))) for k in range(num_clients)]


def run_one(strategy, clients, test, args, seed: int) -> dict:
    cfg = RunConfig(
        rounds=args.rounds,
        clients_per_round=args.per_round,
        train=TrainConfig(epochs=args.epochs, batch_size=64, lr=args.lr, optimizer=args.optimizer),
        seed=seed,
        eval_every=args.eval_every,
    )
    server = Server(strategy, clients, clients[0].x.shape[1], clients[0].num_classes, cfg)
    t0 = time.perf_counter()
    server.run(test)
    hist = server.history
    if not hist[-1].metrics:  # the last round is always evaluated
        hist[-1].metrics = server.evaluate(test)
    curve = [(r.round + 1, r.metrics["P@1"]) for r in hist if r.metrics]
    return {
        "metrics": hist[-1].metrics,
        "P@1_curve": curve,
        "bytes_up": sum(r.bytes_up for r in hist),
        "bytes_down": sum(r.bytes_down for r in hist),
        "seconds": time.perf_counter() - t0,
        "model_tensors": len(server.state),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", default="bibtex")
    parser.add_argument("--fractions", type=float, nargs="*", default=[0.1, 0.25, 0.5, 0.75, 1.0])
    parser.add_argument("--betas", type=float, nargs="*", default=[1.0, 0.5, 0.25])
    parser.add_argument("--hidden", type=int, nargs="*", default=[256, 256, 256])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--optimizer", default="adam", choices=["sgd", "adam"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--normalize", action="store_true", help="rank tensors by RMS change instead of the norm")
    parser.add_argument("--eval-every", type=int, default=5, help="rounds between test evaluations (P@1 curve)")
    parser.add_argument(
        "--out", type=Path, default=None, help="result JSON (default: build/bench-results/fl_partial.json)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: one beta, p 0.25 and 1, 2 rounds, tiny model")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: no barrier waits on a busy machine)")
    args = parser.parse_args()
    if args.quick:  # the quick settings become the defaults: explicit flags still win
        parser.set_defaults(
            betas=[0.5], fractions=[0.25, 1.0], hidden=[16], clients=4, per_round=2, rounds=2, epochs=1, eval_every=1
        )
        args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not (DATA / args.dataset / "train.txt").exists():
        print(f"dataset not found under {DATA} (set FEDKERNELS_DATA_DIR)", file=sys.stderr)
        return 1
    train, test = read_xc(DATA / args.dataset / "train.txt"), read_xc(DATA / args.dataset / "test.txt")
    rows = []
    for beta in args.betas:
        clients = dirichlet_split(train, args.clients, beta, args.seed)
        runs = [("FedAvg", None, FedAvg(hidden=args.hidden))]
        runs += [
            ("PartialExchange", p, PartialExchange(fraction=p, normalize=args.normalize, hidden=args.hidden))
            for p in args.fractions
        ]
        for name, p, strategy in runs:
            r = run_one(strategy, clients, test, args, args.seed)
            rows.append(
                {
                    "beta": beta,
                    "algorithm": name,
                    "p": p,
                    **r["metrics"],
                    "MB_up": r["bytes_up"] / 1e6,
                    "MB_down": r["bytes_down"] / 1e6,
                    "seconds": r["seconds"],
                    "tensors": r["model_tensors"],
                    "P@1_curve": r["P@1_curve"],
                }
            )
            print(
                f"beta={beta} {name} p={p}: P@1 {r['metrics']['P@1']:.4f} P@3 {r['metrics']['P@3']:.4f} "
                f"P@5 {r['metrics']['P@5']:.4f} up {r['bytes_up'] / 1e6:.2f} MB ({r['seconds']:.0f} s)",
                flush=True,
            )
    out = results_path("fl_partial", out=args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    out.write_text(
        json.dumps(
            {
                "dataset": args.dataset,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "rows": rows,
                "note": load_note(load),
                "loadavg_at_end": load,
            },
            indent=2,
        )
    )
    cols = ["beta", "algorithm", "p", "P@1", "P@3", "P@5", "MB_up", "MB_down"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
