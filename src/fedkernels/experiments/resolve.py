"""A run resolved once: the CLI (``fedkernels run``) and the Python API
(:func:`~fedkernels.experiments.runner.run_experiment`) turn an :class:`ExperimentConfig` into a
:class:`ResolvedRun` here, and every layer below takes that object: none looks a name or a path up
again (``python_tests/experiments/test_resolved_once.py`` checks it, a resumed run included).

Resolved means: the algorithm names in their registered spelling (done when the config is built,
:meth:`ExperimentConfig.__post_init__`), every field checked (:meth:`ExperimentConfig.validate`),
the strategies built, the dataset located (a bare name found in the data folders, a fetched copy's
files checked against their recorded hashes) and its declared sizes read from its headers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..fl.strategy import Strategy
from .configuration import ExperimentConfig
from .model_memory import DataShape, check_run_memory, config_shape


@dataclass(frozen=True)
class ResolvedRun:
    """One run's description with nothing left to look up."""

    config: ExperimentConfig
    """The config: algorithm names in their registered spelling, ``dataset`` ``"synthetic"`` or the
    located path."""
    strategies: dict[str, Strategy]
    """The strategy of every algorithm and centralised algorithm, by registered name (what
    :meth:`ExperimentConfig.validate` built)."""
    dataset: Path | None
    """The located dataset (``None``: synthetic)."""
    shape: DataShape | None
    """The data's sizes as the config and the files' headers declare them (``None``: the files declare
    none, e.g. libsvm)."""

    def replaced(self, **changes: Any) -> ResolvedRun:
        """This run with fields of its config that name nothing to look up changed (:data:`PLAIN_FIELDS`:
        a seed of ``--seeds N``, its output and checkpoint folders, the centralised bound's one client).
        The config is copied, not rebuilt, so no name is spelled again.

        Raises:
            ValueError: another field (a new algorithm, option or dataset is resolved by :func:`resolve_run`).
        """
        bad = sorted(set(changes) - set(PLAIN_FIELDS))
        if bad:
            raise ValueError(f"ResolvedRun.replaced: {bad} name what is resolved: build a config and call resolve_run")
        config = copy.copy(self.config)
        for key, value in changes.items():
            setattr(config, key, value)
        return replace(self, config=config)


PLAIN_FIELDS = ("seed", "output", "checkpoint", "resume", "clients_per_round")
"""The config fields :meth:`ResolvedRun.replaced` may change: none names an algorithm or a dataset."""


def as_resolved(run: ResolvedRun | ExperimentConfig) -> ResolvedRun:
    """The Python API's door to the layers below: a :class:`ResolvedRun` as it is, an
    :class:`ExperimentConfig` resolved here (:func:`resolve_run`, its dataset looked up in the default
    data folders). Resolve once and pass the run to call several of them on one config."""
    return run if isinstance(run, ResolvedRun) else resolve_run(run)


def locate_dataset(dataset: str, data_dir: str | Path | None = None) -> Path | None:
    """Where ``dataset`` is: ``None`` for ``"synthetic"``, else the path
    :func:`fedkernels.data.resolve_dataset` finds (a path as given, or a bare name looked up in
    ``data_dir`` and the data folders, any case).

    Raises:
        FileNotFoundError: not found (the message lists where it looked).
    """
    if dataset == "synthetic":
        return None
    from ..data.datasets import resolve_dataset

    return resolve_dataset(dataset, data_dir)


def resolve_run(cfg: ExperimentConfig, data_dir: str | Path | None = None) -> ResolvedRun:
    """``cfg`` resolved: every field validated first (so a bad flag is reported before a missing
    dataset), then the dataset located once and the models checked against its declared sizes.

    Raises:
        ValueError: a bad field (see :meth:`ExperimentConfig.validate`).
        FileNotFoundError: the dataset is nowhere.
    """
    strategies = cfg.validate()
    path = locate_dataset(cfg.dataset, data_dir)
    located = cfg if path is None or str(path) == cfg.dataset else replace(cfg, dataset=str(path))
    shape = config_shape(located)
    if located is not cfg:  # validate saw a name, not the files: check the models against them now
        check_run_memory(located, strategies.values(), shape)
    return ResolvedRun(located, strategies, path, shape)
