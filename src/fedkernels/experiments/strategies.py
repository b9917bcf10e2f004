"""The strategies a run trains: built once (by :meth:`ExperimentConfig.validate`, when the run is
resolved), checked against the data, and handed to :func:`~fedkernels.experiments.experiment.run_algorithm`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..fl.registry import build_strategy
from ..fl.strategy import Strategy
from .checkpoints import run_options

if TYPE_CHECKING:
    from .resolve import ResolvedRun


def run_strategy(name: str, run: ResolvedRun) -> Strategy:
    """The strategy algorithm ``name`` (as registered) runs with: the one the resolution built
    (``run.strategies[name]``), unless the run's options differ from the validated ones (a client secret
    file in this run's checkpoint folder, :func:`~fedkernels.experiments.checkpoints.run_options`): that
    run's own, built here once from the same class (no name is looked up). Strategies keep no state
    between runs, so one object serves every seed.

    Raises:
        ValueError: ``name`` is not one of the run's algorithms in its registered spelling.
    """
    if name not in run.strategies:
        raise ValueError(
            f"{name!r} is not among the run's algorithms {list(run.strategies)} (pass the name as registered)"
        )
    built = run.strategies[name]
    options = run_options(name, run)
    if options == run.config.options_for(name):
        return built
    return build_strategy(type(built), **options)


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
