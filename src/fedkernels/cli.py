"""The ``fedkernels`` command: ``info``, ``bench <name>``, ``run`` (the main job).

fedkernels info
fedkernels bench                         # lists the benches of a checkout
fedkernels bench sketch                  # runs bench/ops/sketch.py of a checkout
fedkernels run --list-presets            # named paper reproductions
fedkernels run --preset fedmlh-bibtex    # 3 seeds, mean ± std beside the paper's P@1
fedkernels run --demo                    # FedAvg vs FedMLH vs FedSS on synthetic data
fedkernels run --config exp.toml --rounds 30
fedkernels run --dataset ../shared/data/bibtex --algorithms FedAvg FedMLH --option FedMLH.num_buckets=40
fedkernels data list                     # public datasets; `data get NAME` downloads one
fedkernels run --dataset EURLex-4K       # a dataset fetched by `fedkernels data get`
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

# Flags map one to one onto ExperimentConfig fields (dashes for underscores).
_RUN_FLAGS: dict[str, tuple[type, str]] = {
    "dataset": (
        str,
        "'synthetic', a file/folder (XC, libsvm, .npz), a shipped name (bibtex; see --data-dir) "
        "or one from `fedkernels data list`",
    ),
    "partition": (str, "fedmlh | fedmlh_single | dirichlet | iid | one_label | primary_label"),
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
    "device": (str, "where training, aggregation and evaluation run: cpu | cuda | cuda:N"),
    "autocast": (str, "mixed precision of local training: off | bf16 (state and aggregation stay float32)"),
    # privacy (docs/api/privacy.md); --secagg is a switch, below
    "secagg_dropouts": (int, "SecAgg+: dropouts always tolerated per session (default: the most the graph allows)"),
    "secagg_bits": (int, "SecAgg+: the ring is Z_2^bits (32: 4 bytes a value)"),
    "secagg_bound": (float, "SecAgg+ without DP: each contributed value is clamped to [-bound, bound]"),
    "secagg_degree": (int, "SecAgg+: neighbours per client (default ~3 log2 n, everyone up to 17 clients)"),
    "dp_clip": (float, "client-level DP: L2 clip of each client's update (needs --dp-noise or --target-epsilon)"),
    "dp_noise": (float, "client-level DP: noise multiplier sigma (noise std = sigma * clip)"),
    "target_epsilon": (float, "client-level DP: pick sigma so the run ends at this epsilon"),
    "dp_delta": (float, "DP delta of the reported epsilon"),
    "embedding_dp_clip": (float, "FedAwS/FedALC server-side DP: L2 clip of each class-embedding update"),
    "embedding_dp_noise": (float, "FedAwS/FedALC server-side DP: noise multiplier on the embedding updates"),
    "dp_sample_clip": (float, "sample-level DP-SGD in local training: per-example L2 clip"),
    "dp_sample_noise": (float, "sample-level DP-SGD: noise multiplier"),
}


def demo_config() -> dict[str, Any]:
    """The README main job: FedAvg vs FedMLH vs FedSS on the synthetic default, a few minutes on 2 cores."""
    return {
        "algorithms": ["FedAvg", "FedMLH", "FedSS"],
        "algorithm_options": {
            "FedAvg": {"hidden": [64]},
            "FedMLH": {"num_tables": 4, "num_buckets": 50, "hidden": [64]},
            "FedSS": {"hidden": [256]},  # the class's own default, as the documented demo ran
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
    """``ALG.key=value`` with value a Python literal (``4``, ``[64, 64]``, ``'median'``), ``true`` /
    ``false`` (as config files write them, any case), or a bare string."""
    head, sep, raw = text.partition("=")
    alg, dot, key = head.partition(".")
    if not sep or not dot or not alg or not key:
        raise ValueError(f"--option must look like ALGORITHM.key=value, got {text!r}")
    if raw.strip().lower() in ("true", "false"):
        return alg, key, raw.strip().lower() == "true"
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return alg, key, value


def default_checkpoint_folder(output: str) -> str:
    """Where a run checkpoints without ``--checkpoint``, and where ``--resume`` alone looks."""
    return str(Path(output) / "checkpoints")


def build_config(args: argparse.Namespace):
    """Defaults < ``--demo`` < ``--preset`` < ``--config`` file < flags given on the command line.

    Algorithm names match case-insensitively (options are keyed by the registered spelling). An
    ``--option`` for an algorithm that is not selected is an error; options a preset or config file
    holds for algorithms that ``--algorithms`` left out are dropped.
    """
    from .experiments.experiment import ExperimentConfig, canonical_name, config_keys, load_config
    from .experiments.limits import field_checks
    from .experiments.presets import load_preset, resolve_preset_dataset

    merged: dict[str, Any] = {}
    if args.demo:
        merged.update(demo_config())
    if args.preset:
        preset = load_preset(args.preset)
        merged.update(preset.config)
        merged["dataset"] = resolve_preset_dataset(merged.get("dataset", "synthetic"), args.data_dir)
        merged.setdefault("output", f"fedkernels-out/{preset.name}")
    if args.config:
        merged.update(load_config(args.config))
    for name in _RUN_FLAGS:
        value = getattr(args, name)
        if value is not None:
            merged[name] = value
    if args.dataset is not None:  # looked up below, once every flag is checked
        merged["dataset"] = args.dataset
    if args.algorithms:
        merged["algorithms"] = args.algorithms
    checks = field_checks()  # the two fields merged below: their shapes first (a file may hold anything)
    for key in ("algorithms", "algorithm_options"):
        if key in merged:
            checks[key](merged[key])
    merged["algorithms"] = [canonical_name(a) for a in merged.get("algorithms", ExperimentConfig().algorithms)]
    if args.ks:
        merged["ks"] = args.ks
    if args.metrics:
        merged["metrics"] = args.metrics
    if args.propensity:
        merged["propensity"] = list(args.propensity)
    if args.checkpoint is not None:
        merged["checkpoint"] = args.checkpoint
    if args.sparse is not None:
        merged["sparse"] = args.sparse
    if args.batch_clients is not None:
        merged["batch_clients"] = args.batch_clients
    if args.secagg is not None:
        merged["secagg"] = args.secagg
    if args.resume:
        merged["resume"] = True
        merged.setdefault("checkpoint", default_checkpoint_folder(merged.get("output", ExperimentConfig.output)))
    selected = set(merged["algorithms"])
    options: dict[str, dict[str, Any]] = {}
    for alg, opts in merged.get("algorithm_options", {}).items():
        if args.algorithms and canonical_name(alg) not in selected:
            continue  # the command line chose the algorithms: a file's options for others do not apply
        options.setdefault(canonical_name(alg), {}).update(opts)
    for text in args.option or []:
        alg, key, value = _parse_option(text)
        canon = canonical_name(alg)
        if canon not in selected:
            raise ValueError(
                f"--option {text}: algorithm {alg!r} is not selected (--algorithms {' '.join(merged['algorithms'])})"
            )
        options.setdefault(canon, {})[key] = value
    merged["algorithm_options"] = options
    cfg = ExperimentConfig(**{k: v for k, v in merged.items() if k in config_keys()})
    cfg.validate()
    if args.dataset is not None:  # a bare name finds a shipped dataset as a preset's does
        cfg.dataset = resolve_preset_dataset(args.dataset, args.data_dir)
    return cfg


def check_against_data(cfg, num_features: int, num_classes: int) -> None:
    """Checks that need the data's sizes, before any training: each strategy builds its initial
    state, and FedMLH's R * B must stay below p (else it saves nothing over FedAvg)."""
    from .fl.registry import make_strategy

    for name in cfg.algorithms:
        strategy = make_strategy(name, **cfg.options_for(name))
        if hasattr(strategy, "hash_size"):
            r, b = strategy.hash_size(num_classes)
            if r * b >= num_classes:
                raise ValueError(
                    f"{strategy.name}: num_tables * num_buckets = {r} * {b} = {r * b} >= p = {num_classes} classes, "
                    f"so its model is no smaller than FedAvg's: lower --option {strategy.name}.num_buckets or "
                    f"{strategy.name}.num_tables (unset, both are picked from p)"
                )


def cmd_run(args: argparse.Namespace) -> int:
    """Run every configured algorithm (over ``--seeds`` seeds), print the results table, write JSON/CSV/PNG."""
    import torch

    if args.list_presets:
        return cmd_list_presets()
    cfg = build_config(args)
    if args.no_checkpoint and (args.resume or args.checkpoint is not None):
        raise ValueError("--no-checkpoint goes with neither --checkpoint nor --resume")
    default_folder = default_checkpoint_folder(cfg.output)  # --resume without --checkpoint looks there too
    auto_checkpoint = not args.no_checkpoint and cfg.checkpoint in (None, default_folder)
    if auto_checkpoint:  # an interrupted run can always be resumed; the folder goes once the run ends
        cfg.checkpoint = default_folder
    args.effective_checkpoint = cfg.checkpoint  # a config file or preset may set it: the Ctrl-C hint reads this
    seeds = args.seeds if args.seeds is not None else (3 if args.preset else 1)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    from .experiments.experiment import check_checkpoints, check_outputs, saved_checkpoints

    check_outputs(cfg)  # both before any data is read: results are never lost to a late error
    check_checkpoints(cfg)
    if cfg.resume and not saved_checkpoints(cfg):
        print(
            f"fedkernels run: --resume: no checkpoint to resume in {cfg.checkpoint}; starting at round 0",
            file=sys.stderr,
        )
    before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        if seeds == 1 and not args.preset:
            _run(cfg, args, Path(cfg.output))
            rc = 0
        else:
            rc = _run_seeds(cfg, args, seeds)
    finally:  # in-process callers (tests, notebooks) keep their own setting
        torch.set_num_threads(before)
    if auto_checkpoint:
        remove_checkpoints(cfg)
    return rc


def remove_checkpoints(cfg) -> None:
    """Delete the finished run's checkpoints (and FedALC's client secret beside its checkpoint) in
    ``cfg.checkpoint`` and its ``seed<k>/`` folders, then the folders if nothing else is in them:
    results are written, nothing is left to resume."""
    from .experiments.experiment import saved_checkpoints

    folder = Path(cfg.checkpoint)
    for path in saved_checkpoints(cfg):
        path.unlink(missing_ok=True)
        path.with_suffix(".secret").unlink(missing_ok=True)  # FedALC's client secret, kept only to resume
    for sub in [*sorted(folder.glob("seed*")), folder]:
        with contextlib.suppress(OSError):  # not empty (a user's file), not a folder, or gone: leave it
            sub.rmdir()


def cmd_list_presets() -> int:
    """Print every shipped preset with one line each."""
    from .experiments.presets import list_presets

    presets = list_presets()
    width = max((len(p.name) for p in presets), default=0)
    for p in presets:
        print(f"{p.name:<{width}}  {p.summary()}")
    return 0


def _run_seeds(cfg, args: argparse.Namespace, seeds: int) -> int:
    """The run at seeds ``cfg.seed .. cfg.seed + seeds - 1``; mean ± std per algorithm, beside the paper's P@1."""
    import json
    from dataclasses import replace

    from .experiments.presets import load_preset
    from .experiments.seeds import seed_summary, seed_table

    preset = load_preset(args.preset) if args.preset else None
    out = Path(cfg.output)
    runs = []
    for i in range(seeds):
        seed = cfg.seed + i
        print(f"\n== seed {seed} ({i + 1}/{seeds}) ==", flush=True)
        one = replace(
            cfg,
            seed=seed,
            output=str(out / f"seed{seed}"),
            checkpoint=None if cfg.checkpoint is None else str(Path(cfg.checkpoint) / f"seed{seed}"),
        )
        runs.append(_run(one, args, Path(one.output)))
    rows = seed_summary(runs, preset.p_at_1 if preset else None)
    table = seed_table(rows)
    print(
        f"\nmean ± std over {seeds} seeds (sample std), final round" + (f"; paper: {preset.source}" if preset else "")
    )
    print(table)
    if preset is not None:
        print(f"\n{preset.dataset_note}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "seeds.md").write_text(table + "\n")
    (out / "seeds.json").write_text(
        json.dumps({"preset": args.preset, "seeds": list(range(cfg.seed, cfg.seed + seeds)), "rows": rows}, indent=2)
    )
    print(f"\nwrote {out}/seeds.md, seeds.json")
    return 0


def _run(cfg, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    from tqdm import tqdm

    from .experiments.experiment import (
        add_common_target,
        metric_columns,
        prepare_data,
        redact_secrets,
        run_algorithm,
        run_centralized,
    )
    from .experiments.report import TABLE_COLUMNS, plot_accuracy, results_table, write_csv, write_json

    data = prepare_data(cfg)
    ds = data.dataset
    check_against_data(cfg, ds.num_features, ds.num_classes)
    print(
        f"dataset {ds.name}: {len(ds.train)} train / {len(data.test)} test samples, {ds.num_features} features, "
        f"{ds.num_classes} classes; partition {cfg.partition} over {len(data.clients)} clients",
        flush=True,
    )
    results = []
    runs = [(name, run_algorithm) for name in cfg.algorithms] + [(name, run_centralized) for name in cfg.centralized]
    for name, run in runs:
        label = name if run is run_algorithm else f"{name} (centralized)"
        bar = tqdm(total=cfg.rounds, desc=f"{label:>8}", unit="round", disable=args.no_progress, file=sys.stderr)
        cum = [0]

        def on_round(rec, bar=bar, cum=cum) -> None:
            cum[0] += rec.bytes_up + rec.bytes_down
            post = {"MB": f"{cum[0] / 1e6:.1f}"}
            if "P@1" in rec.metrics:
                post["P@1"] = f"{rec.metrics['P@1']:.3f}"
            if rec.failed:
                post["failed"] = str(len(rec.failed))
            if "epsilon" in rec.privacy:
                post["ε"] = f"{rec.privacy['epsilon']:.3g}"
            bar.set_postfix(post)
            bar.update(1)

        def on_resume(history, bar=bar, cum=cum) -> None:  # the bar and the MB count start where the run stopped
            cum[0] = sum(r.bytes_up + r.bytes_down for r in history)
            bar.update(len(history))
            bar.set_postfix({"MB": f"{cum[0] / 1e6:.1f}"})

        try:
            if run is run_algorithm:
                results.append(run_algorithm(name, cfg, data, on_round, on_resume))
            else:  # the centralised run keeps no checkpoint, so it never resumes
                results.append(run(name, cfg, data, on_round))
        finally:
            bar.close()
    target = add_common_target(results)
    # the chosen metric families at every k, then the communication columns
    rest = [c for c in TABLE_COLUMNS[1:] if "@" not in c or c.startswith("best") or c.endswith("freq")]
    table = results_table(results, ["algorithm", *metric_columns(cfg.metrics, cfg.ks), *rest])
    print()
    print(table)
    if target is not None:
        print(f"\nMB to target: communication until test P@1 >= {target:.4f} (the lowest best P@1 of the algorithms).")
    for r in results:
        priv = r.get("privacy") or {}
        if "epsilon" in priv:
            print(
                f"{r['algorithm']}: client-level (ε = {priv['epsilon']:.3g}, δ = {priv['delta']:g})-DP after "
                f"{cfg.rounds} rounds, noise multiplier {priv['noise_multiplier']:.3g}"
            )
        if "sample_epsilon" in priv:
            print(f"{r['algorithm']}: sample-level DP-SGD, ε = {priv['sample_epsilon']:.3g} at δ = {cfg.dp_delta:g}")
        if "embedding_epsilon" in priv:
            print(f"{r['algorithm']}: class-embedding DP, ε = {priv['embedding_epsilon']:.3g}")
    failed = sum(r["failed_clients"] for r in results)
    if failed:
        print(f"\nwarning: {failed} client updates failed and were left out (reasons per round in results.json)")
    out.mkdir(parents=True, exist_ok=True)
    from ._info import build_info

    write_json(
        out / "results.json",
        {
            "config": {
                **asdict(cfg),
                "algorithm_options": {a: redact_secrets(o) for a, o in cfg.algorithm_options.items()},
            },
            "dataset": {
                "name": ds.name,
                **ds.notes,
                "train": len(ds.train),
                "test": len(data.test),
                "features": ds.num_features,
                "classes": ds.num_classes,
                "clients": len(data.clients),
            },
            "split": data.split,
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
    return results


def cmd_info(args: argparse.Namespace) -> int:
    """Print the build facts and the registered algorithms."""
    from ._info import info
    from .fl.registry import strategies

    print(info())
    print("algorithms: " + ", ".join(c.name for c in strategies().values()))
    return 0


# bench/ops: the op microbenchmarks; bench/fl: the federated experiments. Script names are unique across both.
BENCH_FOLDERS = ("ops", "fl")


def bench_root() -> Path | None:
    """The ``bench`` folder of the current folder or of the checkout this package was built from."""
    here = Path(__file__).resolve()
    for root in (Path.cwd(), *here.parents[:3]):
        if any(p for folder in BENCH_FOLDERS for p in (root / "bench" / folder).glob("*.py")):
            return root / "bench"
    return None


def find_bench(name: str) -> Path | None:
    """``bench/ops/<name>.py`` or ``bench/fl/<name>.py`` in the current folder or in the checkout this package
    was built from."""
    here = Path(__file__).resolve()
    for root in (Path.cwd(), *here.parents[:3]):
        for folder in BENCH_FOLDERS:
            path = root / "bench" / folder / f"{name}.py"
            if path.is_file():
                return path
    return None


def list_benches(root: Path) -> list[tuple[str, str]]:
    """``(name, first docstring line)`` of every runnable ``bench/ops/*.py`` and ``bench/fl/*.py`` (the helpers
    are left out)."""
    out = []
    for path in [p for folder in BENCH_FOLDERS for p in sorted((root / folder).glob("*.py"))]:
        text = path.read_text()
        if path.stem.endswith("_worker") or "__main__" not in text:
            continue  # helpers, and the peers' worker processes the benches start themselves
        try:
            doc = ((ast.get_docstring(ast.parse(text)) or "").strip().splitlines() or [""])[0]
        except SyntaxError:
            doc = "(does not parse)"
        out.append((path.stem, re.sub(r"\s*\((?:issue|#)\s*#?\d+[^)]*\)", "", doc)))  # no tracker references
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the bench script ``<name>`` with the remaining arguments; with no name, list the benches."""
    if args.name is None:
        root = bench_root()
        if root is None:
            print("fedkernels bench: no bench/ folder found; run it from a fedkernels checkout", file=sys.stderr)
            return 2
        benches = list_benches(root)
        width = max((len(n) for n, _ in benches), default=0)
        print(f"benchmarks in {root} (run: fedkernels bench NAME [--help]):")
        for name, doc in benches:
            print(f"  {name:<{width}}  {doc}")
        return 0
    path = find_bench(args.name)
    if path is None:
        print(
            f"fedkernels bench: {args.name}.py not found in bench/ops or bench/fl; "
            "`fedkernels bench` lists the benches of a checkout",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.call([sys.executable, str(path), *args.bench_args], env=env)


def _default_help(help_: str, name: str) -> str:
    from .experiments.experiment import ExperimentConfig

    default = getattr(ExperimentConfig(), name, None)
    return f"{help_} (default: {default})" if default is not None else help_


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``fedkernels``."""
    from .experiments.experiment import DEFAULT_OPTIONS, ExperimentConfig

    p = argparse.ArgumentParser(prog="fedkernels", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="build facts and registered algorithms").set_defaults(fn=cmd_info)
    b = sub.add_parser("bench", help="run bench/ops/<name>.py or bench/fl/<name>.py of a checkout (no name: list them)")
    b.add_argument("name", nargs="?", default=None)
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    b.set_defaults(fn=cmd_bench)
    defaults = "; ".join(f"{a}: {o}" for a, o in DEFAULT_OPTIONS.items())
    r = sub.add_parser(
        "run",
        help="run algorithms on a dataset and partition",
        description="Run algorithms on a dataset. Precedence: defaults < --demo < --preset < --config < flags. "
        f"Per-algorithm default options (under --option and config files): {defaults}.",
    )
    r.add_argument("--demo", action="store_true", help="FedAvg vs FedMLH vs FedSS on the synthetic default")
    r.add_argument("--preset", help="a named paper reproduction (see --list-presets), or a preset .toml file")
    r.add_argument("--list-presets", action="store_true", help="list the presets, one line each, and exit")
    r.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="run seeds seed..seed+N-1 and report mean ± std (default: 3 with --preset, else 1)",
    )
    r.add_argument(
        "--data-dir",
        default=None,
        help="a folder holding datasets by name, searched first (then $FEDKERNELS_DATA_DIR, ./data, ../shared/data)",
    )
    r.add_argument("--config", help="a JSON or TOML file of run settings (flags override it)")
    r.add_argument(
        "--algorithms",
        nargs="+",
        help="registered algorithm names, any case (see `fedkernels info`) "
        f"(default: {' '.join(ExperimentConfig().algorithms)})",
    )
    r.add_argument(
        "--option", action="append", metavar="ALG.key=value", help="a constructor option of a selected algorithm"
    )
    r.add_argument("--ks", nargs="+", type=int, help="the k of P@k (default: 1 3 5)")
    r.add_argument(
        "--metrics",
        nargs="+",
        help="metric families the results table shows at every k: P nDCG PSP PSnDCG R "
        "(default: all; every one is computed and saved in results.json)",
    )
    r.add_argument(
        "--propensity",
        nargs=2,
        type=float,
        metavar=("A", "B"),
        help="Jain et al.'s propensity A and B for PSP@k/PSnDCG@k (default: the dataset's, "
        "from fedkernels.metrics.PROPENSITY; 0.55 1.5 for others)",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument(
        "--sparse",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep a file dataset's features sparse (torch.sparse_csr) from file to model; "
        "memory grows with the nonzeros, not N x F (default: dense; the synthetic default is always dense)",
    )
    r.add_argument(
        "--batch-clients",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train a round's clients in one batched pass where the algorithm allows it (FedAvg, FedAwS, "
        "FedALC, partial exchange): faster on the CPU, equal to the one-by-one loop up to float rounding "
        "(default: one by one)",
    )
    r.add_argument(
        "--secagg",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sum the clients' updates with SecAgg+ secure aggregation: the server sees only sums "
        "(docs/api/privacy.md)",
    )
    r.add_argument(
        "--checkpoint",
        default=None,
        help="folder of per-algorithm checkpoints, written after every round (resume with --resume); "
        "default <output>/checkpoints, removed when the run ends",
    )
    r.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="write no checkpoints (an interrupted run cannot be resumed)",
    )
    r.add_argument(
        "--resume",
        action="store_true",
        help="continue the run checkpointed in --checkpoint (default folder: <output>/checkpoints)",
    )
    for name, (typ, help_) in _RUN_FLAGS.items():
        r.add_argument(
            "--" + name.replace("_", "-"), dest=name, type=typ, default=None, help=_default_help(help_, name)
        )
    r.set_defaults(fn=cmd_run)
    from .cli_data import add_parser

    add_parser(sub)
    return p


def _resume_hint(args: argparse.Namespace) -> str:
    """How to continue an interrupted command: the same command with ``--resume`` when it checkpointed."""
    if args.command != "run":
        return ""
    argv = sys.argv[1:] if sys.argv and Path(sys.argv[0]).name.startswith("fedkernels") else None
    if getattr(args, "effective_checkpoint", None) is None:
        return "Nothing was saved (--no-checkpoint): run without it to make a run resumable."
    if argv is None:
        return "Run the same command with --resume to continue from its last finished round."
    again = [a for a in argv if a != "--resume"] + ["--resume"]
    return "Continue from its last finished round with: fedkernels " + shlex.join(again)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedkernels`` script."""
    args = parser().parse_args(argv)
    from .data.fetcher import DownloadError
    from .experiments.experiment import AllClientsFailed

    try:
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:  # one line, no traceback: what was saved and how to go on
        print(f"\nfedkernels {args.command}: interrupted. {_resume_hint(args)}", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, DownloadError) as e:
        print(f"fedkernels {args.command}: error: {e}", file=sys.stderr)
        return 2
    except AllClientsFailed as e:
        print(f"fedkernels {args.command}: run failed: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a disk or permission failure: one line naming the file, not a traceback
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        print(f"fedkernels {args.command}: error: {e.strerror or e}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
