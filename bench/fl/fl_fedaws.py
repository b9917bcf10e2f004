"""FedALC against FedAwS (and FedALC-fixed) against FedAvg with one label per client on Bibtex.

Issue 7's experiment (the FedALC paper reports P@1 58.7-59.7 / 48.3-49.2 / 11.6 for FedALC / FedAwS /
FedAvg on Bibtex). Each client holds one label: client c gets every training sample labelled c,
relabelled c alone (a sample with several labels is at several clients). Reads ../shared/data/bibtex
at run time. Writes build/bench-results/fl_fedaws.json unless ``--out PATH`` says where (the committed
table is bench/results/fl/fl_fedaws.json: never overwritten by a probe). ``--quick``: 2 rounds, tiny models,
every algorithm (a smoke run of the whole path, seconds).

    # the committed table (docs/experiments.md, "Reproducing the papers"), merged from two processes:
    PYTHONPATH=src python -m bench.fl.fl_fedaws --algorithms FedAwS FedALC --seeds 0 1 2 --eval-every 50
    PYTHONPATH=src python -m bench.fl.fl_fedaws --algorithms FedAvg --rounds 60 --seeds 0 1 2
    PYTHONPATH=src python -m bench.fl.fl_fedaws --rounds 60 --pull 0 --algorithms FedAvg FedAwS FedALC FedALC-fixed
                                                                                # the first protocol
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from bench.common import markdown_table, read_xc_dense, results_path, write_results
from fedkernels.fl import ClientData, FedAvg, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import FedALC, FedALCFixed, FedAwS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / ".." / "shared" / "data" / "bibtex"
ALGORITHMS = ["FedAvg", "FedAwS", "FedALC", "FedALC-fixed"]
# --quick: the smallest run through every algorithm (explicit flags still win)
QUICK = {
    "rounds": 2,
    "clients_per_round": 2,
    "epochs": 1,
    "embed_dim": 16,
    "hidden": [16],
    "dim": 8,
    "k": 2,
    "fedavg_hidden": [16],
    "algorithms": ALGORITHMS,
}

read_xc = read_xc_dense  # the library's XC reader, dense features


def load(args: argparse.Namespace) -> tuple[ClientData, ClientData]:
    """Bibtex's official train and test parts, raw bag-of-words or (``--l2-normalize``) unit rows."""
    train, test = read_xc(DATA / "train.txt"), read_xc(DATA / "test.txt")
    if args.l2_normalize:
        for d in (train, test):
            d.x = torch.nn.functional.normalize(d.x, dim=1)
    return train, test


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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--clients-per-round", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--lr", type=float, default=0.1, help="local SGD learning rate (1.0 collapses the extractor)")
    ap.add_argument("--model", choices=["mlp", "embed"], default="mlp", help="FedAwS/FedALC feature extractor")
    ap.add_argument("--embed-dim", type=int, default=256)
    ap.add_argument(
        "--hidden", type=int, nargs="*", default=[256], help="extractor widths (embed: after the embedding)"
    )
    ap.add_argument("--dim", type=int, default=64, help="class embedding size")
    ap.add_argument("--pos-margin", type=float, default=0.9)
    # Unit rows in 64 dims start near distance sqrt(2); with margin 1.0 (the first runs) almost no
    # pair is inside the margin, the regulariser is zero and FedALC's weights cannot matter.
    ap.add_argument("--margin", type=float, default=1.414, help="spreadout margin (L2 distance between unit rows)")
    ap.add_argument(
        "--reg-weight", type=float, default=None, help="the papers' lambda: spreadout step = lambda * lr (overrides)"
    )
    ap.add_argument("--spread-lr", type=float, default=0.5, help="server spreadout step size")
    ap.add_argument("--spread-steps", type=int, default=1, help="server spreadout steps per round")
    ap.add_argument("--pull", type=float, default=0.1, help="FedALC: weight of the co-occurrence pull (0: push only)")
    ap.add_argument("--k", type=int, default=10, help="spreadout: the k nearest other classes per class")
    ap.add_argument("--l2-normalize", action="store_true", help="unit-norm feature rows (what `fedkernels run` loads)")
    ap.add_argument("--fedavg-hidden", type=int, nargs="*", default=[256])
    ap.add_argument("--eval-every", type=int, default=None, help="test P@k every N rounds (default: last only)")
    ap.add_argument("--algorithms", nargs="+", default=ALGORITHMS[:3], choices=ALGORITHMS)
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="result JSON (default: build/bench-results/<name>.json; never bench/results)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, tiny models, every algorithm")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: no barrier waits on a busy machine)")
    return ap


def spread_options(args: argparse.Namespace) -> dict:
    """FedAwS/FedALC constructor options from the command line."""
    spread_lr = args.spread_lr if args.reg_weight is None else args.reg_weight * args.lr
    return {
        "dim": args.dim,
        "hidden": tuple(args.hidden),
        "k": args.k,
        "margin": args.margin,
        "pos_margin": args.pos_margin,
        "model": args.model,
        "embed_dim": args.embed_dim,
        "spread_lr": spread_lr,
        "spread_steps": args.spread_steps,
    }


def make_strategy(name: str, args: argparse.Namespace):
    opts = spread_options(args)
    if name == "FedAvg":
        return FedAvg(hidden=tuple(args.fedavg_hidden), loss="softmax")
    if name == "FedAwS":
        return FedAwS(**opts)
    if name == "FedALC":
        return FedALC(**opts, pull=args.pull, client_secret=b"fl_fedaws bench secret")
    return FedALCFixed(**opts, fixed_steps=200, client_secret=b"fl_fedaws bench secret")


def run_one(name: str, seed: int, args, clients, train, test) -> dict:
    s = make_strategy(name, args)
    cfg = RunConfig(
        rounds=args.rounds,
        clients_per_round=args.clients_per_round,
        train=TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr),
        seed=seed,
        eval_every=args.eval_every or args.rounds,
    )
    t0 = time.perf_counter()
    server = Server(s, clients, train.x.shape[1], train.num_classes, cfg)
    hist = server.run(test)
    m = hist[-1].metrics
    return {
        "algorithm": s.name,
        "seed": seed,
        "P@1": m.get("P@1"),
        "P@3": m.get("P@3"),
        "P@5": m.get("P@5"),
        "MB_up": sum(h.bytes_up for h in hist) / 1e6,
        "MB_down": sum(h.bytes_down for h in hist) / 1e6,
        "setup_MB_up": server.setup_bytes_up / 1e6,  # the label reports (FedALC); 0 otherwise
        "seconds": time.perf_counter() - t0,
        "curve": curve(hist),
    }


def curve(hist) -> list[tuple[int, float, float]]:
    """(round, test P@1, cumulative MB up + down) at every evaluated round."""
    out, total = [], 0
    for h in hist:
        total += h.bytes_up + h.bytes_down
        if h.metrics:
            out.append((h.round + 1, h.metrics["P@1"], total / 1e6))
    return out


def summarise(rows: list[dict]) -> list[dict]:
    """mean and std of P@1/3/5 over seeds, per algorithm."""
    out = []
    for name in dict.fromkeys(r["algorithm"] for r in rows):
        rs = [r for r in rows if r["algorithm"] == name]
        row: dict = {"algorithm": name, "seeds": len(rs)}
        for key in ("P@1", "P@3", "P@5"):
            vals = [r[key] for r in rs]
            row[key] = statistics.mean(vals)
            row[key + "_std"] = statistics.stdev(vals) if len(vals) > 1 else 0.0
        row["MB_up"] = statistics.mean(r["MB_up"] for r in rs)
        row["MB_down"] = statistics.mean(r["MB_down"] for r in rs)
        out.append(row)
    return out


def parse_args(ap: argparse.ArgumentParser, quick: dict) -> argparse.Namespace:
    """Parse the command line; ``--quick`` makes ``quick`` the defaults (explicit flags still win)."""
    args = ap.parse_args()
    if args.quick:
        ap.set_defaults(**quick)
        args = ap.parse_args()
    return args


def main() -> None:
    args = parse_args(parser(), QUICK)
    torch.set_num_threads(args.threads)
    train, test = load(args)
    clients = one_label_per_client(train)
    rows = []
    for seed in args.seeds:
        for name in args.algorithms:
            rows.append(run_one(name, seed, args, clients, train, test))
            print({k: v for k, v in rows[-1].items() if k != "curve"}, "curve", rows[-1]["curve"], flush=True)
    summary = summarise(rows)
    path = results_path("fl_fedaws", out=args.out)
    extra = {
        "dataset": "bibtex (official split)",
        "clients": len(clients),
        "seeds": args.seeds,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "summary": summary,
        "spread_options": {k: list(v) if isinstance(v, tuple) else v for k, v in spread_options(args).items()},
    }
    path = write_results("fl_fedaws", rows, extra, path=path)
    print(markdown_table(summary, list(summary[0])))
    print(f"results in {path}")


if __name__ == "__main__":
    main()
