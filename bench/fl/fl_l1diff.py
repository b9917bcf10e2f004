"""The l1-difference update in the federated loop on real data: bytes per update and accuracy over gamma.

Bibtex (Mulan's official split: 4880 train / 2515 test, 1836 features, 159 labels), iid split of the
training set into 10 clients by a seeded permutation (seed 0), 4 clients per round, a linear BCE
model, one l1-difference step per client per round (full local gradient), eta fixed, gamma swept
relative to the mean |gradient| at initialisation. gamma = 0 is plain FedSGD with every value sent
(the codec then holds ~one run per parameter, i.e. the dense float32 update plus gamma bits).
Also the personalised network variant (shared hidden layer, per-client heads coupled over a
feature-covariance kNN graph).

Run: PYTHONPATH=src python -m bench.fl.fl_l1diff [--rounds R] [--quick] [--out PATH]
Writes build/bench-results/fl_l1diff.json (the committed table: ``--out bench/results/fl/fl_l1diff.json``).
``--quick``: 2 rounds, gamma 0 and 1 only (plus the float16 and network variants): a smoke run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from bench import common
from bench.common import DATA, multi_hot, read_xc
from fedkernels.fl import ClientData, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import L1Diff, L1DiffNetwork


def to_client(x: torch.Tensor, labels: list[list[int]], num_labels: int) -> ClientData:
    indptr = torch.zeros(len(labels) + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(torch.tensor([len(ls) for ls in labels], dtype=torch.int64), 0)
    indices = torch.tensor([v for ls in labels for v in ls], dtype=torch.int64)
    return ClientData(x, indptr, indices, num_labels)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--eta", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: no barrier waits on a busy machine)")
    ap.add_argument("--out", type=Path, default=None, help="result JSON (default: build/bench-results/fl_l1diff.json)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 rounds, gamma 0 and 1")
    args = ap.parse_args()
    if args.quick:  # the quick settings become the defaults: explicit flags still win
        ap.set_defaults(rounds=2)
        args = ap.parse_args()
    gammas = (0.0, 1.0) if args.quick else (0.0, 0.1, 0.3, 1.0, 3.0)
    torch.set_num_threads(args.threads)
    x, labels, nl = read_xc(DATA / "bibtex" / "train.txt")
    xt, labels_t, _ = read_xc(DATA / "bibtex" / "test.txt")
    test = to_client(xt, labels_t, nl)
    perm = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    clients = [to_client(x[idx], [labels[i] for i in idx.tolist()], nl) for idx in perm.chunk(10)]
    # gradient scale at initialisation (the loop's init for seed 0), to set gamma relative to it
    probe = Server(L1Diff(), clients, x.shape[1], nl, RunConfig(rounds=1, clients_per_round=4, seed=0))
    w = probe.state["0.weight"].clone().requires_grad_()
    b = probe.state["0.bias"].clone().requires_grad_()
    y = multi_hot(labels, nl)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w.T + b, y)
    gscale = float(torch.cat([t.reshape(-1) for t in torch.autograd.grad(loss, [w, b])]).abs().mean())
    params = w.numel() + b.numel()

    rows = []
    cfg = RunConfig(
        rounds=args.rounds, clients_per_round=4, train=TrainConfig(batch_size=512), seed=0, eval_every=args.rounds
    )
    runs = [("L1Diff", rel, lambda g: L1Diff(gamma=g, eta=args.eta)) for rel in gammas]
    runs.append(("L1Diff f16", 1.0, lambda g: L1Diff(gamma=g, eta=args.eta, value_dtype="float16")))
    runs.append(
        (
            "L1DiffNetwork",
            1.0,
            lambda g: L1DiffNetwork(10, gamma=g, eta=args.eta, lam=0.01, k=3, hidden=(64,), tol=1e-4),
        )
    )
    for name, rel, make in runs:
        t0 = time.perf_counter()
        s = Server(make(rel * gscale), clients, x.shape[1], nl, cfg)
        s.run(test)
        m = s.history[-1].metrics
        ups = sum(len(r.clients) - len(r.failed) for r in s.history)
        up_bytes = sum(r.bytes_up for r in s.history)
        down_bytes = sum(r.bytes_down for r in s.history)
        n_params = sum(t[0].numel() if k.startswith("personal.") else t.numel() for k, t in s.state.items())
        rows.append(
            {
                "strategy": name,
                "gamma / mean|g0|": rel,
                "rounds": args.rounds,
                "P@1": m["P@1"],
                "P@3": m["P@3"],
                "P@5": m["P@5"],
                "KiB per update": up_bytes / ups / 1024,
                "bits/param": 8 * up_bytes / ups / n_params,
                "dense f32 KiB": 4 * n_params / 1024,
                "MB_up": up_bytes / 1e6,
                "MB_down": down_bytes / 1e6,
                "seconds": time.perf_counter() - t0,
            }
        )
        print(rows[-1], flush=True)
    path = common.write_results(
        "fl_l1diff",
        rows,
        {
            "dataset": "bibtex (official split), iid 10 clients (seeded permutation 0), 4 per round",
            "eta": args.eta,
            "mean_abs_grad_at_init": gscale,
            "linear_params": params,
            "quick": args.quick,
        },
        path=common.results_path("fl_l1diff", out=args.out),
    )
    print(f"\nwrote {path}\n")
    print(common.markdown_table(rows, list(rows[0].keys())))


if __name__ == "__main__":
    main()
