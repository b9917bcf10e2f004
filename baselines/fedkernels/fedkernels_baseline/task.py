"""What the server and the clients of a preset run share: the preset's settings, its data and
partition, the algorithm.

A preset (``fedkernels run --list-presets``) fixes the dataset, the partition into clients, the
rounds and the local training; the run config picks one of its algorithms and may override a few
settings (0 or "" keeps the preset's). The dataset is read and partitioned once per process (the
simulation engine's workers serve many nodes each) and each node keeps only its own client's rows.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
from flwr.app import Context

from fedkernels.experiments.experiment import ExperimentConfig, PreparedData, canonical_name, prepare_data
from fedkernels.experiments.presets import load_preset, resolve_preset_dataset
from fedkernels.fl import RunConfig, Strategy
from fedkernels.fl.registry import make_strategy


def experiment(context: Context) -> ExperimentConfig:
    """The preset's ExperimentConfig with the run config's overrides (0 / "" keep the preset's)."""
    c = context.run_config
    preset = load_preset(str(c["preset"]))
    fields: dict[str, Any] = dict(preset.config)
    fields["dataset"] = resolve_preset_dataset(fields.get("dataset", "synthetic"), str(c["data-dir"]) or None)
    for key, field in (("rounds", "rounds"), ("clients-per-round", "clients_per_round"), ("eval-every", "eval_every")):
        if int(c[key]):
            fields[field] = int(c[key])
    fields["seed"] = int(c["seed"])
    cfg = ExperimentConfig(**fields)
    cfg.validate()
    return cfg


def algorithm(context: Context, cfg: ExperimentConfig) -> str:
    """The algorithm of this run: the run config's ``algorithm``, one of the preset's."""
    name = canonical_name(str(context.run_config["algorithm"]))
    known = [canonical_name(a) for a in cfg.algorithms]
    if name not in known:
        raise ValueError(f"algorithm {name!r} is not one of preset {context.run_config['preset']}'s: {known}")
    return name


def strategy(context: Context) -> Strategy:
    """The run's strategy, built from the preset's options (same on the server and every client)."""
    cfg = experiment(context)
    return make_strategy(algorithm(context, cfg), **cfg.options_for(algorithm(context, cfg)))


@functools.lru_cache(maxsize=2)
def _prepared(cfg_json: str) -> PreparedData:
    import json

    return prepare_data(ExperimentConfig(**json.loads(cfg_json)))


def data(context: Context) -> PreparedData:
    """The dataset and its partition (read once per process)."""
    import json

    cfg = experiment(context)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    return _prepared(json.dumps(dataclasses.asdict(cfg), sort_keys=True))


def run_config(context: Context, cfg: ExperimentConfig, num_clients: int) -> RunConfig:
    """The federated loop's settings, as ``fedkernels run`` builds them for this preset."""
    c = context.run_config
    return RunConfig(
        rounds=cfg.rounds,
        clients_per_round=min(cfg.clients_per_round, num_clients),
        train=cfg.train_config(),
        seed=cfg.seed,
        eval_every=cfg.eval_every,
        eval_k=tuple(cfg.ks),
        client_timeout=float(c["timeout"]) or None,
        checkpoint=str(c["checkpoint"]) or None,
        eval_clients=int(c["eval-clients"]) or None,
        device=str(c["device"]),
    )
