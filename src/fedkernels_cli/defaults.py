"""The run settings' defaults as plain values (no torch), read by both
:class:`fedkernels.experiments.ExperimentConfig` (its field defaults) and the ``fedkernels run``
parser (its help), so the two cannot drift apart."""

from __future__ import annotations

from typing import Any

METRIC_FAMILIES = ("P", "nDCG", "PSP", "PSnDCG", "R")  # as ``<family>@<k>`` in the reports

PARTITIONS = ("fedmlh", "fedmlh_single", "dirichlet", "dirichlet_sample", "iid", "one_label", "primary_label")

# Per-algorithm options a run uses unless the config or --option says otherwise: linear models.
# On the shipped data a hidden layer trained a few local epochs per round learns far slower than a
# linear model (Bibtex, 12 rounds, FedAvg: a 256-wide layer under SGD barely learns, a linear model under
# Adam does), and FedMLH's R sub-models then each carry the whole layer (about R times FedAvg's bytes).
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "FedAvg": {"hidden": []},
    "FedMLH": {"hidden": []},
    "FedSS": {"hidden": []},
}

# One entry per ExperimentConfig field (what each means: the field's comment there). Lists and dicts
# are copied for every config.
RUN_DEFAULTS: dict[str, Any] = {
    "algorithms": ["FedAvg", "FedMLH"],
    "algorithm_options": {},
    "dataset": "synthetic",
    "synthetic": {},
    "feature_dim": None,
    "l2_normalize": True,
    "sparse": False,
    "test_fraction": 0.2,
    "partition": "fedmlh",
    "num_frequent": None,
    "beta": 0.5,
    "sample_fraction": 0.75,
    "clients": 10,
    "clients_per_round": 4,
    "rounds": 20,
    "local_epochs": 5,
    "batch_size": 64,
    "lr": 0.01,
    "optimizer": "adam",
    "seed": 0,
    "eval_every": 1,
    "ks": [1, 3, 5],
    "metrics": list(METRIC_FAMILIES),
    "propensity": None,
    "max_test": None,
    "output": "fedkernels-out",
    "threads": 1,
    "checkpoint": None,
    "resume": False,
    "client_weighting": "samples",
    "batch_clients": False,
    "late_window": 0.25,
    "centralized": [],
    "client_test_fraction": 0.0,
    "client_size": 4,
    "retrieval": False,
    "device": "cpu",
    "autocast": "off",
    "secagg": False,
    "secagg_dropouts": None,
    "secagg_bits": 32,
    "secagg_bound": 4.0,
    "secagg_degree": None,
    "secagg_corrupt_fraction": 0.1,
    "secagg_dropout_fraction": 0.1,
    "secagg_weight_cap": 4096.0,
    "l1diff_segments": 0,
    "dp_clip": None,
    "dp_noise": None,
    "target_epsilon": None,
    "dp_delta": 1e-5,
    "dp_mechanism": "poisson",
    "dp_seeded": False,
    "dp_sample_clip": None,
    "dp_sample_noise": 0.0,
}
