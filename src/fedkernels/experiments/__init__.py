"""Experiments on top of the federated loop: configs, named presets, runs over seeds, reports.

``fedkernels run`` is a thin shell over this package: :class:`ExperimentConfig` says what to run,
:func:`prepare_data` loads and partitions the data, :func:`run_algorithm` runs one algorithm, and
:mod:`.presets` holds the named paper reproductions (``fedkernels run --preset NAME``).
"""

from .experiment import (
    DEFAULT_OPTIONS,
    AllClientsFailed,
    ExperimentConfig,
    PreparedData,
    add_common_target,
    load_config,
    prepare_data,
    run_algorithm,
)
from .presets import Preset, Sweep, list_presets, load_preset, preset_names
from .seeds import seed_summary

__all__ = [
    "DEFAULT_OPTIONS",
    "AllClientsFailed",
    "ExperimentConfig",
    "PreparedData",
    "Preset",
    "Sweep",
    "add_common_target",
    "list_presets",
    "load_config",
    "load_preset",
    "prepare_data",
    "preset_names",
    "run_algorithm",
    "seed_summary",
]
