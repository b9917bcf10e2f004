"""FedALC against FedAwS (and FedALC-fixed) against FedAvg with one label per client on Bibtex.

Issue 7's experiment (the FedALC paper reports P@1 about 59 / 49 / 12 for FedALC / FedAwS / FedAvg on
Bibtex). Each client holds one label: client c gets every training sample labelled c, relabelled c
alone (a sample with several labels is at several clients). Reads ../shared/data/bibtex at run time.

    PYTHONPATH=src python bench/fl_fedaws.py --rounds 60 --clients-per-round 20 --margin 1.414
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from common import (
    markdown_table,
    read_xc_dense,
    write_results,
)

from fedkernels.fl import ClientData, FedAvg, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import FedALC, FedALCFixed, FedAwS

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "bibtex"


read_xc = read_xc_dense  # the library's XC reader, dense features


def one_label_per_client(data: ClientData) -> list[ClientData]:
    clients = []
    rows = torch.repeat_interleave(torch.arange(len(data)), data.indptr.diff())
    for c in range(data.num_classes):
        sel = rows[data.indices == c]
        if sel.numel() == 0:
            continue
        clients.append(
            ClientData(data.x[sel], torch.arange(sel.numel() + 1), torch.full((sel.numel(),), c), data.num_classes)
        )
    return clients


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--clients-per-round", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.1, help="local SGD learning rate")
    # Unit rows in 64 dims start near distance sqrt(2); with margin 1.0 (the first runs) almost no
    # pair is inside the margin, the regulariser is zero and FedALC's weights cannot matter.
    ap.add_argument("--margin", type=float, default=1.414, help="spreadout margin (L2 distance between unit rows)")
    ap.add_argument("--spread-lr", type=float, default=0.5, help="server spreadout step size")
    ap.add_argument("--spread-steps", type=int, default=1, help="server spreadout steps per round")
    ap.add_argument("--k", type=int, default=10, help="spreadout: the k nearest other classes per class")
    ap.add_argument(
        "--algorithms",
        nargs="+",
        default=["FedAvg", "FedAwS", "FedALC", "FedALC-fixed"],
        choices=["FedAvg", "FedAwS", "FedALC", "FedALC-fixed"],
    )
    ap.add_argument("--out", default="fl_fedaws", help="results name: bench/results/<out>.json")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: no barrier waits on a busy machine)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    train, test = read_xc(DATA / "train.txt"), read_xc(DATA / "test.txt")
    clients = one_label_per_client(train)
    cfg = RunConfig(
        rounds=args.rounds,
        clients_per_round=args.clients_per_round,
        train=TrainConfig(epochs=args.epochs, batch_size=32, lr=args.lr),
        seed=args.seed,
        eval_every=args.rounds,
    )
    spread = {"dim": 64, "hidden": (256,), "k": args.k, "margin": args.margin}
    make = {
        "FedAvg": lambda: FedAvg(hidden=(256,), loss="softmax"),
        "FedAwS": lambda: FedAwS(**spread, spread_lr=args.spread_lr, spread_steps=args.spread_steps),
        "FedALC": lambda: FedALC(**spread, spread_lr=args.spread_lr, spread_steps=args.spread_steps),
        "FedALC-fixed": lambda: FedALCFixed(**spread, fixed_steps=200),
    }
    strategies = [make[a]() for a in args.algorithms]
    rows = []
    for s in strategies:
        t0 = time.perf_counter()
        server = Server(s, clients, train.x.shape[1], train.num_classes, cfg)
        hist = server.run(test)
        m = hist[-1].metrics
        rows.append(
            {
                "algorithm": s.name,
                "P@1": m.get("P@1"),
                "P@3": m.get("P@3"),
                "P@5": m.get("P@5"),
                "MB_up": sum(h.bytes_up for h in hist) / 1e6,
                "MB_down": sum(h.bytes_down for h in hist) / 1e6,
                "setup_MB_up": getattr(s, "setup_bytes_up", 0) / 1e6,
                "seconds": time.perf_counter() - t0,
            }
        )
        print(rows[-1], flush=True)
    path = write_results(
        args.out, rows, {"dataset": "bibtex (official split)", "clients": len(clients), "args": vars(args)}
    )
    print(markdown_table(rows, list(rows[0])))
    print(f"results in {path}")


if __name__ == "__main__":
    main()
