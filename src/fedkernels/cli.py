"""The ``fedkernels`` command: ``info``, ``bench <name>``, ``run`` (the main job).

fedkernels info
fedkernels bench sketch                  # runs bench/sketch.py of a checkout
fedkernels run --demo                    # FedAvg vs FedMLH vs FedSS on synthetic data
fedkernels run --config exp.toml --rounds 30
fedkernels run --dataset ../shared/data/bibtex --algorithms FedAvg FedMLH --option FedMLH.num_buckets=40
fedkernels data list                     # public datasets; `data get NAME` downloads one
fedkernels run --dataset EURLex-4K       # a dataset fetched by `fedkernels data get`
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

# Flags map one to one onto ExperimentConfig fields (dashes for underscores).
_RUN_FLAGS: dict[str, tuple[type, str]] = {
    "dataset": (str, "'synthetic' (default), a file/folder (XC, libsvm, .npz) or a name from `fedkernels data list`"),
    "partition": (str, "fedmlh | dirichlet | iid | one_label"),
    "rounds": (int, "federated rounds"),
    "clients": (int, "number of clients"),
    "clients_per_round": (int, "clients sampled per round"),
    "local_epochs": (int, "local epochs per round"),
    "batch_size": (int, "local minibatch size"),
    "lr": (float, "local learning rate"),
    "optimizer": (str, "sgd | adam"),
    "seed": (int, "the run's one seed"),
    "feature_dim": (int, "hash features to this many buckets (XC data)"),
    "num_frequent": (int, "frequent classes (FedMLH split, freq/infreq metrics); default 10%% of classes"),
    "beta": (float, "Dirichlet concentration (partition=dirichlet)"),
    "eval_every": (int, "evaluate every this many rounds"),
    "max_test": (int, "evaluate on at most this many test samples"),
    "output": (str, "output folder (JSON, CSV, PNG)"),
    "threads": (int, "torch threads (default: torch's; 1 is much faster on a busy machine)"),
}


def demo_config() -> dict[str, Any]:
    """The README main job: FedAvg vs FedMLH vs FedSS on the synthetic default, a few minutes on 2 cores."""
    return {
        "algorithms": ["FedAvg", "FedMLH", "FedSS"],
        "algorithm_options": {
            "FedAvg": {"hidden": [64]},
            "FedMLH": {"num_tables": 4, "num_buckets": 50, "hidden": [64]},
        },
        "dataset": "synthetic",
        "synthetic": {
            "num_samples": 5000,
            "num_features": 64,
            "num_classes": 1000,
            "labels_per_sample": 3.0,
            "exponent": 1.0,
            "noise": 1.0,
        },
        "partition": "fedmlh",
        "clients": 10,
        "clients_per_round": 4,
        "rounds": 15,
        "local_epochs": 1,
        "batch_size": 64,
        "optimizer": "adam",
        "lr": 0.01,
        "seed": 0,
        "output": "fedkernels-demo",
    }


def _parse_option(text: str) -> tuple[str, str, Any]:
    """``ALG.key=value`` with value a Python literal (``4``, ``[64, 64]``, ``'median'``) or a bare string."""
    head, sep, raw = text.partition("=")
    alg, dot, key = head.partition(".")
    if not sep or not dot or not alg or not key:
        raise ValueError(f"--option must look like ALGORITHM.key=value, got {text!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return alg, key, value


def build_config(args: argparse.Namespace):
    """Defaults < ``--demo`` preset < ``--config`` file < flags given on the command line."""
    from .experiments.experiment import ExperimentConfig, load_config

    merged: dict[str, Any] = {}
    if args.demo:
        merged.update(demo_config())
    if args.config:
        merged.update(load_config(args.config))
    for name in _RUN_FLAGS:
        value = getattr(args, name)
        if value is not None:
            merged[name] = value
    if args.algorithms:
        merged["algorithms"] = args.algorithms
    if args.ks:
        merged["ks"] = args.ks
    options = {k: dict(v) for k, v in merged.get("algorithm_options", {}).items()}
    for text in args.option or []:
        alg, key, value = _parse_option(text)
        options.setdefault(alg, {})[key] = value
    merged["algorithm_options"] = options
    known = {f.name for f in fields(ExperimentConfig)}
    cfg = ExperimentConfig(**{k: v for k, v in merged.items() if k in known})
    cfg.validate()
    return cfg


def cmd_run(args: argparse.Namespace) -> int:
    """Run every configured algorithm, print the results table, write JSON/CSV/PNG."""
    import torch

    cfg = build_config(args)
    before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, args)
    finally:  # in-process callers (tests, notebooks) keep their own setting
        torch.set_num_threads(before)


def _run(cfg, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .experiments.experiment import add_common_target, prepare_data, run_algorithm
    from .experiments.report import plot_accuracy, results_table, write_csv, write_json

    data = prepare_data(cfg)
    ds = data.dataset
    print(
        f"dataset {ds.name}: {len(ds.train)} train / {len(data.test)} test samples, {ds.num_features} features, "
        f"{ds.num_classes} classes; partition {cfg.partition} over {len(data.clients)} clients",
        flush=True,
    )
    results = []
    for name in cfg.algorithms:
        bar = tqdm(total=cfg.rounds, desc=f"{name:>8}", unit="round", disable=args.no_progress, file=sys.stderr)
        cum = [0]

        def on_round(rec, bar=bar, cum=cum) -> None:
            cum[0] += rec.bytes_up + rec.bytes_down
            post = {"MB": f"{cum[0] / 1e6:.1f}"}
            if "P@1" in rec.metrics:
                post["P@1"] = f"{rec.metrics['P@1']:.3f}"
            bar.set_postfix(post)
            bar.update(1)

        results.append(run_algorithm(name, cfg, data, on_round))
        bar.close()
    target = add_common_target(results)
    table = results_table(results)
    print()
    print(table)
    if target is not None:
        print(f"\nMB to target: communication until test P@1 >= {target:.4f} (the lowest best P@1 of the algorithms).")
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    from ._info import build_info

    write_json(
        out / "results.json",
        {
            "config": asdict(cfg),
            "dataset": {
                "name": ds.name,
                **ds.notes,
                "train": len(ds.train),
                "test": len(data.test),
                "features": ds.num_features,
                "classes": ds.num_classes,
                "clients": len(data.clients),
            },
            "build": build_info(),
            "target_P@1": target,
            "results": results,
        },
    )
    (out / "results.md").write_text(table + "\n")
    write_csv(out / "rounds.csv", results)
    png = plot_accuracy(out / "accuracy.png", results, "P@1", f"{ds.name}, partition {cfg.partition}")
    print(
        f"\nwrote {out}/results.json, results.md, rounds.csv"
        + (", accuracy.png" if png else " (install matplotlib for accuracy.png)")
    )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """Print the build facts and the registered algorithms."""
    from ._info import info
    from .fl.registry import strategies

    print(info())
    print("algorithms: " + ", ".join(c.name for c in strategies().values()))
    return 0


def find_bench(name: str) -> Path | None:
    """``bench/<name>.py`` in the current folder or in the checkout this package was built from."""
    here = Path(__file__).resolve()
    for root in (Path.cwd(), *here.parents[:3]):
        path = root / "bench" / f"{name}.py"
        if path.is_file():
            return path
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    """Run ``bench/<name>.py`` with the remaining arguments."""
    path = find_bench(args.name)
    if path is None:
        print(f"fedkernels bench: bench/{args.name}.py not found; run it from a fedkernels checkout", file=sys.stderr)
        return 2
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.call([sys.executable, str(path), *args.bench_args], env=env)


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``fedkernels``."""
    p = argparse.ArgumentParser(prog="fedkernels", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="build facts and registered algorithms").set_defaults(fn=cmd_info)
    b = sub.add_parser("bench", help="run bench/<name>.py of a checkout")
    b.add_argument("name")
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    b.set_defaults(fn=cmd_bench)
    r = sub.add_parser("run", help="run algorithms on a dataset and partition")
    r.add_argument("--demo", action="store_true", help="FedAvg vs FedMLH vs FedSS on the synthetic default")
    r.add_argument("--config", help="a JSON or TOML file of run settings (flags override it)")
    r.add_argument("--algorithms", nargs="+", help="registered algorithm names (see `fedkernels info`)")
    r.add_argument("--option", action="append", metavar="ALG.key=value", help="a constructor option of an algorithm")
    r.add_argument("--ks", nargs="+", type=int, help="the k of P@k (default 1 3 5)")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    for name, (typ, help_) in _RUN_FLAGS.items():
        r.add_argument("--" + name.replace("_", "-"), dest=name, type=typ, default=None, help=help_)
    r.set_defaults(fn=cmd_run)
    from .cli_data import add_parser

    add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedkernels`` script."""
    args = parser().parse_args(argv)
    from .data.fetcher import DownloadError

    try:
        return int(args.fn(args) or 0)
    except (ValueError, FileNotFoundError, DownloadError) as e:
        print(f"fedkernels {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
