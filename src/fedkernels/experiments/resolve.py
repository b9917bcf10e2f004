"""A run resolved once: the CLI (``fedkernels run``) and the Python API
(:func:`~fedkernels.experiments.runner.run_experiment`) turn an :class:`ExperimentConfig` into a
:class:`ResolvedRun` here, and every layer below takes that: none looks a name or a path up again
(``python_tests/experiments/test_resolved_once.py`` checks it).

Resolved means: the algorithm names in their registered spelling (done when the config is built,
:meth:`ExperimentConfig.__post_init__`), every field checked (:meth:`ExperimentConfig.validate`),
the strategies built, the dataset located (a bare name found in the data folders, a fetched copy's
files checked against their recorded hashes) and its declared sizes read from its headers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

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
