"""Every algorithm of ``fedkernels run`` evaluated at p = 312330 labels in bounded memory (issue 30).

    python -m bench.fl.fl_xc_eval [--classes 312330] [--max-test 4096] [--as-limit-gib 3]
                                  [--algorithms FedAvg FedMLH ...] [--option ALG.key=value ...]
                                  [--quick] [--out FILE]

The data: :func:`fedkernels.data.synthetic_multilabel` with ``--classes`` power-law labels and 64
features, drawn once (the draw is slow at p = 312330) and written as the scipy ``.npz`` folder layout
``fedkernels run --dataset`` reads (train_X/Y.npz, test_X/Y.npz; ``--max-test`` test rows). Each
algorithm then runs as its own ``fedkernels run --config <json>`` process on that folder: one federated
round (2 of 4 clients, one local epoch, small models, one thread: the point is the label dimension),
then the run's own evaluation of
``--max-test`` test rows with every XMC metric (P@k, nDCG@k, PSP@k, PSnDCG@k, R@k). The process runs
under an address-space limit (RLIMIT_AS, ``--as-limit-gib``) below what the dense ``[N_test, p]``
float32 score matrix alone would take (4096 x 312330 x 4 B = 5.1 GB against 3 GiB): an evaluation
that built those scores fails with an allocation error instead of passing. Reported per algorithm:
exit status, wall seconds, the child's peak resident set (``wait4``'s ``ru_maxrss``), and P@1, PSP@1,
PSnDCG@5 of its final evaluation read back from its ``results.json``. ``--option`` changes one
algorithm's option as ``fedkernels run --option`` does (e.g. ``FedALC-fixed.fixed_steps=2``: its
one-off embedding training is O(C^2 d) a step); the row records the options the run used.

Writes build/bench-results/fl_xc_eval.json (the committed table: ``--out
bench/results/fl/fl_xc_eval.json``) and prints a markdown table. ``--quick``: p = 4096, 512 test rows,
a 2 GiB limit (a smoke run of the whole path, seconds per algorithm).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from bench.common import markdown_table, results_path, write_results
from fedkernels.data import synthetic_multilabel
from fedkernels_cli.config import parse_option

# Small models everywhere (the class dimension is the subject); options each algorithm needs.
HIDDEN = [16]
OPTIONS: dict[str, dict] = {
    "FedAvg": {"hidden": HIDDEN},
    "FedMLH": {"hidden": HIDDEN, "num_tables": 8, "num_buckets": 5000},  # the FedMLH paper's (R, B) at p = 312330
    "FedSS": {"hidden": HIDDEN, "embed_dim": 16},
    "FedSS-NegOnly": {"hidden": HIDDEN, "embed_dim": 16},
    "FedSS-PosOnly": {"hidden": HIDDEN, "embed_dim": 16},
    "FedSS-FullSoftmax": {"hidden": HIDDEN, "embed_dim": 16},
    "FedSS-FedAwS": {"hidden": HIDDEN, "embed_dim": 16},
    "FedAwS": {"model": "mlp", "hidden": HIDDEN, "dim": 16},
    "FedALC": {"model": "mlp", "hidden": HIDDEN, "dim": 16},
    "FedALC-fixed": {"model": "mlp", "hidden": HIDDEN, "dim": 16},
    "FedAvg-positive": {"model": "mlp", "hidden": HIDDEN, "dim": 16},
    "FedAvg-fixed": {"model": "mlp", "hidden": HIDDEN, "dim": 16},
    "PartialExchange": {"hidden": HIDDEN},
    "L1Diff": {"hidden": HIDDEN},
    "L1DiffNetwork": {"hidden": HIDDEN, "num_clients": 4},
    "LabelPrior": {},
}
ALGORITHMS = list(OPTIONS)
# The positive-label family trains on one label per client (the FedAwS/FedALC papers' setting; their
# clients refuse anything else): one client per class with samples, 2 of them a round.
ONE_LABEL = {"FedAwS", "FedALC", "FedALC-fixed", "FedAvg-positive", "FedAvg-fixed"}


def write_dataset(folder: Path, classes: int, train: int, test: int) -> None:
    """Synthetic power-law data as train_X/Y.npz and test_X/Y.npz (scipy sparse) in ``folder``."""
    data = synthetic_multilabel(train + test, 64, classes, labels_per_sample=3.0, seed=0)
    x = sp.csr_matrix(data.x.numpy())
    ones = np.ones(data.indices.numel(), np.float32)
    y = sp.csr_matrix((ones, data.indices.numpy(), data.indptr.numpy()), shape=(train + test, classes))
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", slice(0, train)), ("test", slice(train, train + test))):
        sp.save_npz(folder / f"{name}_X.npz", x[rows])
        sp.save_npz(folder / f"{name}_Y.npz", y[rows])


def run_config(algorithm: str, dataset: Path, max_test: int, output: Path, options: dict | None = None) -> dict:
    """The ``fedkernels run`` config of one algorithm's run (JSON keys = ExperimentConfig fields);
    ``options`` override the algorithm's entries in OPTIONS."""
    opts = {**OPTIONS[algorithm], **(options or {})}
    return {
        "algorithms": [algorithm],
        "algorithm_options": {algorithm: opts} if opts else {},
        "dataset": str(dataset),
        "partition": "one_label" if algorithm in ONE_LABEL else "fedmlh",
        "clients": 4,
        "clients_per_round": 2,
        "rounds": 1,
        "local_epochs": 1,
        "batch_size": 64,
        "optimizer": "adam",
        "lr": 0.01,
        "max_test": max_test,
        "threads": 1,
        "checkpoint": None,
        "output": str(output),
    }


def run_one(algorithm: str, args: argparse.Namespace, workdir: Path) -> dict:
    """One algorithm's run under the address-space limit: status, seconds, peak RSS, final metrics."""
    out = workdir / algorithm
    cfg_path = workdir / f"{algorithm}.json"
    options = args.options.get(algorithm, {})
    cfg_path.write_text(json.dumps(run_config(algorithm, workdir / "data", args.max_test, out, options)))
    limit = int(args.as_limit_gib * 2**30)

    def cap_address_space() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    cmd = [sys.executable, "-m", "fedkernels_cli", "run", "--config", str(cfg_path), "--no-progress", "--no-checkpoint"]
    start = time.perf_counter()
    with open(workdir / f"{algorithm}.log", "w") as log:
        pid = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=cap_address_space).pid
        _, status, usage = os.wait4(pid, 0)  # reaps the child and gives its own peak RSS
    code = os.waitstatus_to_exitcode(status)
    row: dict = {
        "algorithm": algorithm,
        "exit": code,
        "seconds": round(time.perf_counter() - start, 1),
        "peak_rss_MiB": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
        "as_limit_MiB": limit // 2**20,
    }
    if options:
        row["options"] = options
    results = out / "results.json"
    if code != 0 or not results.exists():
        row["error"] = (workdir / f"{algorithm}.log").read_text()[-2000:]
        return row
    final = final_metrics(json.loads(results.read_text()), algorithm)
    row.update({k: final.get(k) for k in ("P@1", "PSP@1", "PSnDCG@5", "R@5")})
    return row


def final_metrics(results: dict, algorithm: str) -> dict:
    """The final evaluation of ``algorithm`` in a run's results.json."""
    for entry in results["results"]:
        if entry["algorithm"] == algorithm:
            return entry["final"]
    raise KeyError(f"{algorithm} not in results.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--classes", type=int, default=312330)
    ap.add_argument("--train", type=int, default=6000, help="synthetic training samples")
    ap.add_argument("--max-test", type=int, default=4096, help="test rows evaluated")
    ap.add_argument("--as-limit-gib", type=float, default=3.0, help="RLIMIT_AS of each run")
    ap.add_argument("--algorithms", nargs="+", default=ALGORITHMS, choices=ALGORITHMS)
    ap.add_argument("--option", action="append", default=[], metavar="ALG.key=value", help="override an option")
    ap.add_argument("--quick", action="store_true", help="p = 4096, 512 test rows, 2 GiB (a smoke run)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.options = {}
    for text in args.option:
        alg, key, value = parse_option(text)
        if alg not in args.algorithms:
            ap.error(f"--option {text}: {alg} is not among --algorithms")
        args.options.setdefault(alg, {})[key] = value
    if args.quick:
        args.classes, args.train, args.max_test, args.as_limit_gib = 4096, 1500, 512, 2.0
    dense_bytes = args.max_test * args.classes * 4
    print(
        f"p = {args.classes}, {args.max_test} test rows: dense float32 scores alone {dense_bytes / 2**20:.0f} MiB; "
        f"each run capped at {args.as_limit_gib:g} GiB of address space",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="fl_xc_eval_") as tmp:
        start = time.perf_counter()
        write_dataset(Path(tmp) / "data", args.classes, args.train, args.max_test)
        print(f"dataset written in {time.perf_counter() - start:.0f} s", flush=True)
        for algorithm in args.algorithms:
            rows.append(run_one(algorithm, args, Path(tmp)))
            print({k: v for k, v in rows[-1].items() if k != "error"}, flush=True)
            if "error" in rows[-1]:
                print(rows[-1]["error"], flush=True)
    meta = {
        "classes": args.classes,
        "train": args.train,
        "max_test": args.max_test,
        "dense_scores_MiB": round(dense_bytes / 2**20, 1),
        "as_limit_GiB": args.as_limit_gib,
    }
    out = results_path("fl_xc_eval", "cpu", args.out, args.quick)
    write_results("fl_xc_eval", rows, meta, path=out)
    print(markdown_table(rows, ["algorithm", "exit", "seconds", "peak_rss_MiB", "P@1", "PSP@1", "PSnDCG@5", "R@5"]))
    failed = [r["algorithm"] for r in rows if r["exit"] != 0]
    if failed:
        sys.exit(f"failed under the limit: {failed}")


if __name__ == "__main__":
    main()
