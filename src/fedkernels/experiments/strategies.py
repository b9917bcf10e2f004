"""The strategies a run trains: built once (by :meth:`ExperimentConfig.validate`), checked against
the data, and handed to :func:`~fedkernels.experiments.experiment.run_algorithm`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..fl.registry import make_strategy
from ..fl.strategy import Strategy
from .checkpoints import run_options

if TYPE_CHECKING:
    from .configuration import ExperimentConfig


def run_strategy(name: str, cfg: ExperimentConfig, built: dict[str, Strategy]) -> Strategy:
    """The strategy algorithm ``name`` runs with under ``cfg``: the one :meth:`ExperimentConfig.validate`
    ``built``, unless the run's options differ from the validated ones (a client secret file in this
    run's checkpoint folder, :func:`~fedkernels.experiments.checkpoints.run_options`): that run's own,
    built here once. Strategies keep no state between runs, so one object serves every seed."""
    options = run_options(name, cfg)
    if options == cfg.options_for(name):
        return built[name]
    return make_strategy(name, **options)


def check_against_data(strategies: list[Strategy], num_classes: int) -> None:
    """Checks that need the data's sizes, before any training: FedMLH's R * B must stay below p (else
    it saves nothing over FedAvg).

    Raises:
        ValueError: naming the strategy and the options to lower.
    """
    for strategy in strategies:
        size = strategy.hash_size(num_classes)
        if size is None:
            continue
        r, b = size
        if r * b >= num_classes:
            raise ValueError(
                f"{strategy.name}: num_tables * num_buckets = {r} * {b} = {r * b} >= p = {num_classes} classes, "
                f"so its model is no smaller than FedAvg's: lower --option {strategy.name}.num_buckets or "
                f"{strategy.name}.num_tables (unset, both are picked from p)"
            )
