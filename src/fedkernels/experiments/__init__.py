"""Experiments on top of the federated loop: configs, named presets, runs over seeds, reports.

``fedkernels run`` is a thin shell over this package: :class:`ExperimentConfig` says what to run
(:mod:`.configuration`; :mod:`.resolve` resolves it once: names, the dataset, the strategies),
:func:`run_experiment` runs it over seeds and writes the result files (:mod:`.runner`,
:mod:`.outputs`), :func:`prepare_data` loads and partitions the data (:mod:`.preparation`),
:func:`run_algorithm` runs one algorithm through :meth:`fedkernels.fl.Server.run` (checkpoints:
:mod:`.checkpoints`), and :mod:`.presets` holds the named paper reproductions (``fedkernels run
--preset NAME``).
"""

from fedkernels_cli.defaults import DEFAULT_OPTIONS

from .configuration import ExperimentConfig, load_config
from .experiment import AllClientsFailed, add_common_target, run_algorithm
from .preparation import PreparedData, prepare_data
from .presets import Preset, Sweep, list_presets, load_preset, preset_names
from .resolve import ResolvedRun, resolve_run
from .runner import run_experiment
from .seeds import seed_summary

__all__ = [
    "DEFAULT_OPTIONS",
    "AllClientsFailed",
    "ExperimentConfig",
    "PreparedData",
    "Preset",
    "ResolvedRun",
    "Sweep",
    "add_common_target",
    "list_presets",
    "load_config",
    "load_preset",
    "prepare_data",
    "preset_names",
    "resolve_run",
    "run_algorithm",
    "run_experiment",
    "seed_summary",
]
