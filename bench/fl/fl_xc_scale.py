"""FedMLH vs FedAvg vs FedSS end to end at the FedMLH paper's label counts.

    PYTHONPATH=src python -m bench.fl.fl_xc_scale [--scales 131073 312330] [--train 4000] [--rounds 3]

Data: :func:`fedkernels.data.synthetic_xc` (power-law labels, topic co-occurrence, ~200 nonzero
features per sample out of ``--features``), kept as ``torch.sparse_csr`` from generator to model;
FedMLH's non-iid partition (the 10% most frequent labels dealt to clients). Models (one hidden
layer of ``--hidden`` units everywhere, so they differ only in their output layers):

- FedAvg: ``F -> h -> p`` (BCE over all p labels);
- FedMLH: R sub-models ``F -> h -> B`` (the paper's (R, B) = (4, 4000) at p = 131073, (8, 5000) at 312330);
- FedSS: body ``F -> h`` and class rows ``W [p, h]``; each client downloads its positives' rows
  plus ``--negatives`` sampled ones.

Per algorithm and scale: seconds per round, bytes down and up per round (from the real
serialisation), model bytes, the client's peak memory (the largest peak resident-set growth over
one client's ``update`` call: decode, local training, encode — measured by resetting VmHWM through
/proc/self/clear_refs), and the server's memory (state + the decoded uploads it holds + the peak
growth during ``aggregate``), and P@1/P@5 on held-out samples. Runs with one thread.
Writes build/bench-results/fl_xc_scale.json (the committed table: ``--out bench/results/fl/fl_xc_scale.json``)
and prints a markdown table. ``--quick``: p = 2048 with (R, B) = (2, 128), 200 + 100 samples, F = 1024,
2 rounds (a smoke run of the whole path; its ratios mean nothing).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import markdown_table, rerun_argv, results_path, write_results
from fedkernels.data import XCSpec, fedmlh_partition, make_clients, synthetic_xc, to_client_data
from fedkernels.fl import RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import FedAvg, FedMLH, FedSS
from fedkernels.fl.client import LocalClient
from fedkernels.metrics import ranking_metrics
from fedkernels.sparse_rows import slice_rows

SCALES = {131073: (4, 4000), 312330: (8, 5000)}  # the FedMLH paper's p -> (R, B)
QUICK_SCALES = {2048: (2, 128)}  # --quick's small p -> (R, B): R * B < p as at the paper's scales
PAPER = {"communication": "2x to 18.75x", "memory": "up to 3.40x"}  # FedAvg over FedMLH, the paper's claims


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_growth(fn):
    """``(fn(), bytes)``: the peak resident-set growth while ``fn`` runs (VmHWM reset before it)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _rss_kib("VmRSS")
    out = fn()
    return out, max(0, _rss_kib("VmHWM") - base) * 1024


class MeasuredClient:
    """A :class:`LocalClient` whose ``update`` records its peak memory growth."""

    def __init__(self, inner: LocalClient, peaks: list[int]) -> None:
        self.inner, self.peaks = inner, peaks

    def request(self, round: int, seed: int):
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int):
        out, peak = peak_growth(lambda: self.inner.update(download, round, seed))
        self.peaks.append(peak)
        return out


def param_count(algo: str, f: int, h: int, p: int, r: int, b: int, s: int = 0) -> int:
    """Parameters a client holds (FedSS: the body plus its s rows; ``s = p`` gives the full model)."""
    if algo == "FedAvg":
        return f * h + h + h * p + p
    if algo == "FedMLH":
        return r * (f * h + h + h * b + b)
    return f * h + h + s * h  # FedSS: body F -> h (linear) + rows


def run_one(algo: str, clients, test, f: int, p: int, args, r: int, b: int) -> dict:
    if algo == "FedAvg":
        strategy = FedAvg(hidden=(args.hidden,))
    elif algo == "FedMLH":
        strategy = FedMLH(num_tables=r, num_buckets=b, hidden=(args.hidden,))
    else:
        strategy = FedSS(num_negatives=args.negatives, embed_dim=args.hidden, hidden=())
    peaks: list[int] = []
    cfg = RunConfig(
        rounds=args.rounds,
        clients_per_round=args.per_round,
        train=TrainConfig(epochs=args.epochs, batch_size=args.batch, lr=args.lr, optimizer="adam"),
        seed=args.seed,
    )
    server = Server(strategy, clients, f, p, cfg, client_wrapper=lambda i, e: MeasuredClient(e, peaks))
    aggregate = strategy.aggregate
    agg_peaks: list[int] = []
    held: list[int] = []

    def measured_aggregate(state, results, round):
        held.append(
            sum(t.numel() * t.element_size() for t in state.values())
            + sum(t.numel() * t.element_size() for res in results for t in res.payload.values())
        )
        out, peak = peak_growth(lambda: aggregate(state, results, round))
        agg_peaks.append(peak)
        return out

    strategy.aggregate = measured_aggregate  # type: ignore[method-assign]
    rounds = []
    for _ in range(args.rounds):
        rec = server.run_round()
        assert not rec.failed, rec.failed
        rounds.append(rec)
        print(
            f"    {algo} round {rec.round}: {rec.seconds:.1f} s, down {rec.bytes_down / 2**20:.1f} MiB, "
            f"up {rec.bytes_up / 2**20:.1f} MiB",
            flush=True,
        )
    t0 = time.perf_counter()
    preds = [strategy.predict_topk(server.state, slice_rows(test.x, i, i + 256), 5) for i in range(0, len(test), 256)]
    metrics = ranking_metrics(torch.cat(preds), test.indptr, test.indices, (1, 5))
    eval_s = time.perf_counter() - t0
    model_bytes = strategy.model_bytes(server.state)
    full = param_count(algo, f, args.hidden, p, r, b, s=p) * 4
    if algo != "FedSS":
        assert model_bytes == full, (algo, model_bytes, full)  # the formula the ratio table uses
    n_rounds = len(rounds)
    return {
        "algorithm": algo,
        "p": p,
        "R": r if algo == "FedMLH" else None,
        "B": b if algo == "FedMLH" else None,
        "rounds": n_rounds,
        "s/round": float(np.mean([x.seconds for x in rounds])),
        "MiB down/round": float(np.mean([x.bytes_down for x in rounds])) / 2**20,
        "MiB up/round": float(np.mean([x.bytes_up for x in rounds])) / 2**20,
        "model MiB": model_bytes / 2**20,
        "client MiB": max(peaks) / 2**20,
        "server held MiB": max(held) / 2**20,
        "server agg MiB": max(agg_peaks) / 2**20,
        "server MiB": max(h + a for h, a in zip(held, agg_peaks, strict=True)) / 2**20,
        "P@1": float(metrics["P@1"]),
        "P@5": float(metrics["P@5"]),
        "eval s": eval_s,
    }


# glibc raises its mmap threshold (up to 32 MiB) after large frees, after which freed tensors stay
# resident and a later peak is invisible in VmHWM; a fixed threshold (set before the process starts)
# keeps every tensor above 128 KiB mmap-backed, so the peak-growth measurements see them.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def main() -> None:
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        os.execve(sys.executable, rerun_argv(), {**os.environ, **MALLOC_ENV, "OMP_NUM_THREADS": "1"})
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=sorted(SCALES))
    ap.add_argument("--algorithms", nargs="+", default=["FedAvg", "FedMLH", "FedSS"])
    ap.add_argument("--train", type=int, default=4000, help="training samples")
    ap.add_argument("--test", type=int, default=1000, help="held-out samples")
    ap.add_argument("--features", type=int, default=2**14, help="vocabulary size F")
    ap.add_argument("--hidden", type=int, default=64, help="hidden width h (FedSS: embedding width)")
    ap.add_argument("--negatives", type=int, default=1024, help="FedSS negatives per client per round")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--per-round", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=None, help="result JSON (default: build/bench-results/fl_xc_scale.json)"
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: p = 2048, 300 samples, F = 1024, 2 rounds")
    args = ap.parse_args()
    if args.quick:  # the quick settings become the defaults: explicit flags still win
        ap.set_defaults(
            scales=sorted(QUICK_SCALES),
            train=200,
            test=100,
            features=1024,
            hidden=8,
            negatives=16,
            clients=4,
            per_round=2,
            rounds=2,
        )
        args = ap.parse_args()
    known = {**SCALES, **QUICK_SCALES}
    if any(p not in known for p in args.scales):
        ap.error(f"--scales: choose from {sorted(known)} (each p needs its (R, B))")
    torch.set_num_threads(1)
    rows, ratios = [], []
    for p in args.scales:
        r, b = known[p]
        t0 = time.perf_counter()
        spec = XCSpec(
            num_samples=args.train + args.test,
            num_features=args.features,
            num_classes=p,
            num_topics=max(1, p // 100),
            seed=args.seed,
        )
        data = synthetic_xc(spec)
        full = to_client_data(data.features, data.labels)
        train = full.rows(torch.arange(args.train))
        test = full.rows(torch.arange(args.train, args.train + args.test))
        shards = fedmlh_partition(train.indptr, train.indices, p, args.clients, max(1, p // 10), args.seed)
        clients = make_clients(train.x, shards, p)
        gen_s = time.perf_counter() - t0
        print(
            f"p={p}: {args.train}+{args.test} samples, F={args.features}, "
            f"{data.features.nnz / data.num_samples:.0f} nonzeros/sample, "
            f"{int((np.bincount(data.labels.indices, minlength=p) > 0).sum())} labels seen, "
            f"client sizes {[len(c) for c in clients]}, {gen_s:.1f} s",
            flush=True,
        )
        by_algo = {}
        for algo in args.algorithms:
            row = run_one(algo, clients, test, args.features, p, args, r, b)
            by_algo[algo] = row
            rows.append(row)
        if "FedAvg" in by_algo and "FedMLH" in by_algo:
            avg, mlh = by_algo["FedAvg"], by_algo["FedMLH"]
            comm = lambda x: x["MiB down/round"] + x["MiB up/round"]  # noqa: E731
            ratios.append(
                {
                    "p": p,
                    "R": r,
                    "B": b,
                    "model FedAvg/FedMLH": avg["model MiB"] / mlh["model MiB"],
                    "comm FedAvg/FedMLH": comm(avg) / comm(mlh),
                    "client mem FedAvg/FedMLH": avg["client MiB"] / mlh["client MiB"],
                    "server mem FedAvg/FedMLH": avg["server MiB"] / mlh["server MiB"],
                    **({"comm FedAvg/FedSS": comm(avg) / comm(by_algo["FedSS"])} if "FedSS" in by_algo else {}),
                }
            )
    # the model-size ratio FedAvg/FedMLH = (F + 1 + p (h + 1) / h ...) exactly from param_count, over F and h
    analytic = [
        {
            "p": p,
            "F": f,
            "h": h,
            "FedAvg/FedMLH": param_count("FedAvg", f, h, p, *SCALES[p]) / param_count("FedMLH", f, h, p, *SCALES[p]),
        }
        for p in sorted(SCALES)
        for f in (4096, 16384, 40000, 2**17)
        for h in (64, 256)
    ]
    analytic += [
        {"p": p, "F": "any", "h": "linear", "FedAvg/FedMLH": p / (SCALES[p][0] * SCALES[p][1])} for p in sorted(SCALES)
    ]
    cols = [
        "p",
        "algorithm",
        "s/round",
        "MiB down/round",
        "MiB up/round",
        "model MiB",
        "client MiB",
        "server MiB",
        "P@1",
        "P@5",
    ]
    print(markdown_table(rows, cols))
    print(markdown_table(ratios, list(ratios[0]) if ratios else []))
    print(markdown_table(analytic, ["p", "F", "h", "FedAvg/FedMLH"]))
    path = write_results(
        "fl_xc_scale",
        rows,
        {
            "ratios": ratios,
            "model_size_ratio_by_F_h": analytic,
            "paper": PAPER,
            "settings": {k: v for k, v in vars(args).items() if k != "out"},
            "data": "fedkernels.data.synthetic_xc, num_topics = p // 100, other fields default",
            "memory": "client: largest VmHWM growth over one client's update (decode, train, encode); server: "
            "state + decoded uploads held + VmHWM growth during aggregate; glibc mmap threshold fixed at 128 KiB",
        },
        results_path("fl_xc_scale", out=args.out),
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
