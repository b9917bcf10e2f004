"""FedSS against FullSoftmax, NegOnly and PosOnly at several |S_k| on a real dataset.

    PYTHONPATH=src python -m bench.fl.fl_sampled [--dataset delicious] [--rounds 30] [--negatives 16,64,256]

Reads ``../shared/data/<dataset>/{train,test}.txt`` (Extreme Classification format) at run time.
Partition: label-skewed — labels are shuffled with the seed and a sample goes to client
``rank(its first label) mod C`` (so each client holds a disjoint slice of the label space, as in
FedSS's setting); samples without labels go to a seeded random client. Features are scaled per
sample to unit L2 norm. Writes build/bench-results/fl_sampled.json (the committed table: ``--out
bench/results/fl/fl_sampled.json``) and prints a markdown table. ``--quick``: Bibtex, 2 rounds, one m, tiny
model, every variant (a smoke run).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from bench.common import markdown_table, results_path, write_results
from fedkernels.fl import ClientData, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import FedSS, FullSoftmax, NegOnly, PosOnly
from fedkernels.fl.seeding import generator
from fedkernels.metrics import ranking_metrics

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def read_xc(path: Path) -> ClientData:
    """A file in the Extreme Classification format as dense features and CSR labels."""
    lines = path.read_text().splitlines()
    n, f, p = (int(v) for v in lines[0].split())
    x = torch.zeros(n, f)
    indptr, indices = [0], []
    for i, line in enumerate(lines[1 : n + 1]):
        parts = line.split(" ")
        labels = [int(v) for v in parts[0].split(",") if v] if parts and ":" not in parts[0] else []
        feats = parts[1:] if parts and ":" not in parts[0] else parts
        for kv in feats:
            if kv:
                k, v = kv.split(":")
                x[i, int(k)] = float(v)
        indices.extend(labels)
        indptr.append(len(indices))
    x = x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return ClientData(x, torch.tensor(indptr), torch.tensor(indices, dtype=torch.int64), p)


def label_skew(data: ClientData, num_clients: int, seed: int) -> list[ClientData]:
    """Client of a sample = rank of its first label in a seeded shuffle, mod num_clients."""
    g = generator(seed, "partition")
    rank = torch.argsort(torch.randperm(data.num_classes, generator=g))
    lens = data.indptr.diff()
    first = torch.where(
        lens > 0, data.indices[data.indptr[:-1].clamp_max(max(len(data.indices) - 1, 0))], torch.zeros_like(lens)
    )
    client = torch.where(lens > 0, rank[first] % num_clients, torch.randint(0, num_clients, (len(data),), generator=g))
    return [data.rows(torch.nonzero(client == c)[:, 0]) for c in range(num_clients)]


def popularity_baseline(train: ClientData, test: ClientData) -> dict[str, float]:
    """P@1/3/5 of predicting the most frequent training labels for every test sample: a model
    that does not beat this has learned nothing about its input."""
    top = torch.bincount(train.indices, minlength=train.num_classes).argsort(descending=True, stable=True)[:5]
    m = ranking_metrics(top.expand(len(test), 5).contiguous(), test.indptr, test.indices, (1, 3, 5))
    return {k: m[k] for k in ("P@1", "P@3", "P@5")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="delicious")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=4)
    ap.add_argument("--negatives", default="16,64,256", help="m values for the sampled variants")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--optimizer", default="adam", choices=["sgd", "adam"])
    ap.add_argument("--epochs", type=int, default=2, help="local epochs per round")
    ap.add_argument("--hidden", type=int, nargs="*", default=[256], help="hidden widths of the body MLP")
    ap.add_argument("--embed-dim", type=int, default=64)
    ap.add_argument("--scale", type=float, default=1.0, help="logit temperature")
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["FullSoftmax", "FedSS", "NegOnly", "PosOnly"],
        choices=["FullSoftmax", "FedSS", "NegOnly", "PosOnly"],
    )
    ap.add_argument("--eval-every", type=int, default=5, help="rounds between test evaluations (P@1 curve)")
    ap.add_argument("--out", type=Path, default=None, help="result JSON (default: build/bench-results/fl_sampled.json)")
    ap.add_argument("--quick", action="store_true", help="smoke run: Bibtex, 2 rounds, one m, tiny model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: no barrier waits on a busy machine)")
    args = ap.parse_args()
    if args.quick:  # the quick settings become the defaults: explicit flags still win
        ap.set_defaults(
            dataset="bibtex",
            rounds=2,
            clients=4,
            per_round=2,
            negatives="8",
            epochs=1,
            hidden=[16],
            embed_dim=8,
            eval_every=1,
        )
        args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = DATA / args.dataset
    train, test = read_xc(root / "train.txt"), read_xc(root / "test.txt")
    clients = label_skew(train, args.clients, args.seed)
    popularity = popularity_baseline(train, test)
    print(f"popularity baseline (the k most frequent training labels for everyone): {popularity}", flush=True)
    cfg = RunConfig(
        rounds=args.rounds,
        clients_per_round=args.per_round,
        seed=args.seed,
        eval_every=args.eval_every,
        train=TrainConfig(epochs=args.epochs, batch_size=64, lr=args.lr, optimizer=args.optimizer),
    )
    opts = {"embed_dim": args.embed_dim, "hidden": args.hidden, "scale": args.scale}
    runs: list[tuple[str, int | None, object]] = []
    if "FullSoftmax" in args.variants:
        runs.append(("FedSS-FullSoftmax", None, FullSoftmax(**opts)))
    for m in (int(v) for v in args.negatives.split(",") if v):
        if "FedSS" in args.variants:
            runs.append(("FedSS", m, FedSS(num_negatives=m, **opts)))
        if "NegOnly" in args.variants:
            runs.append(("FedSS-NegOnly", m, NegOnly(num_negatives=m, **opts)))
    if "PosOnly" in args.variants:
        runs.append(("FedSS-PosOnly", 0, PosOnly(**opts)))
    rows = []
    for name, m, strategy in runs:
        t0 = time.perf_counter()
        server = Server(strategy, clients, train.x.shape[1], train.num_classes, cfg)
        server.run(test)
        hist = server.history
        metrics = hist[-1].metrics or server.evaluate(test)
        rows.append(
            {
                "algorithm": name,
                "m": m,
                "rounds": len(hist),
                "P@1_curve": [(r.round + 1, r.metrics["P@1"]) for r in hist if r.metrics],
                "P@1": metrics["P@1"],
                "P@3": metrics["P@3"],
                "P@5": metrics["P@5"],
                "MB_down": sum(r.bytes_down for r in hist) / 1e6,
                "MB_up": sum(r.bytes_up for r in hist) / 1e6,
                "seconds": time.perf_counter() - t0,
            }
        )
        print(rows[-1], flush=True)
    path = write_results(
        "fl_sampled",
        rows,
        {
            "dataset": args.dataset,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "popularity": popularity,
            "loadavg_at_end": os.getloadavg(),
            "partition": "label-skew (first label rank mod clients)",
        },
        path=results_path("fl_sampled", out=args.out),
    )
    print(markdown_table(rows, ["algorithm", "m", "P@1", "P@3", "P@5", "MB_down", "MB_up", "seconds"]))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
