"""``fedkernels run``'s flags merged into one validated :class:`~fedkernels.experiments.ExperimentConfig`,
resolved once (:func:`~fedkernels.experiments.resolve.resolve_run`) into the run every layer below takes."""

from __future__ import annotations

import argparse
import ast
from typing import Any

from fedkernels.experiments.checkpoints import default_checkpoint_folder
from fedkernels.experiments.experiment import ExperimentConfig, config_keys, load_config
from fedkernels.experiments.limits import field_checks
from fedkernels.experiments.names import canonical_name
from fedkernels.experiments.presets import load_preset
from fedkernels.experiments.resolve import ResolvedRun, resolve_run

from .parser import RUN_FLAGS


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


def parse_option(text: str) -> tuple[str, str, Any]:
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


def build_config(args: argparse.Namespace) -> ExperimentConfig:
    """The validated config of ``fedkernels run``'s parsed ``args`` (see :func:`configure`)."""
    return configure(args).config


def configure(args: argparse.Namespace) -> ResolvedRun:
    """Defaults < ``--demo`` < ``--preset`` < ``--config`` file < flags given on the command line.

    Algorithm names match case-insensitively (options are keyed by the registered spelling). An
    ``--option`` for an algorithm that is not selected is an error; options a preset or config file
    holds for algorithms that ``--algorithms`` left out are dropped. The checkpoint folder is decided
    here too (``<output>/checkpoints`` unless ``--no-checkpoint`` or one is given), so the resolved run
    is the whole run.

    Returns:
        the resolved run: the validated config, the strategies its validation built (the run uses
        these), the located dataset and its shape.
    """
    if getattr(args, "no_checkpoint", False) and (args.resume or args.checkpoint is not None):
        raise ValueError("--no-checkpoint goes with neither --checkpoint nor --resume")
    merged: dict[str, Any] = {}
    if args.demo:
        merged.update(demo_config())
    if args.preset:
        preset = load_preset(args.preset)
        merged.update(preset.config)
        merged.setdefault("dataset", "synthetic")  # located with the rest by resolve_run
        merged.setdefault("output", f"fedkernels-out/{preset.name}")
    if args.config:
        merged.update(load_config(args.config))
    for name in RUN_FLAGS:
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
    if args.dp_seeded is not None:
        merged["dp_seeded"] = args.dp_seeded
    if args.resume:
        merged["resume"] = True
        merged.setdefault("checkpoint", default_checkpoint_folder(merged.get("output", ExperimentConfig.output)))
    selected = set(merged["algorithms"])
    # the centralised bounds keep their options too: they are the same model on the pooled data
    centralized = {canonical_name(a) for a in merged.get("centralized", ExperimentConfig().centralized)}
    options: dict[str, dict[str, Any]] = {}
    for alg, opts in merged.get("algorithm_options", {}).items():
        if args.algorithms and canonical_name(alg) not in selected | centralized:
            continue  # the command line chose the algorithms: a file's options for others do not apply
        options.setdefault(canonical_name(alg), {}).update(opts)
    for text in args.option or []:
        alg, key, value = parse_option(text)
        canon = canonical_name(alg)
        if canon not in selected:
            raise ValueError(
                f"--option {text}: algorithm {alg!r} is not selected (--algorithms {' '.join(merged['algorithms'])})"
            )
        options.setdefault(canon, {})[key] = value
    merged["algorithm_options"] = options
    output = merged.get("output", ExperimentConfig.output)  # not text: validation below names it
    if not getattr(args, "no_checkpoint", False) and merged.get("checkpoint") is None and isinstance(output, str):
        # an interrupted run can always be resumed; this folder goes once the run ends (fedkernels_cli/run.py)
        merged["checkpoint"] = default_checkpoint_folder(output)
    cfg = ExperimentConfig(**{k: v for k, v in merged.items() if k in config_keys()})
    return resolve_run(cfg, args.data_dir)  # a bare name finds a shipped dataset, once every field is checked
