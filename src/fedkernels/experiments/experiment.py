"""An experiment: several algorithms on one dataset and partition, evaluated per round.

This is what ``fedkernels run`` executes. Everything (data, partition, client sampling, training)
derives from ``ExperimentConfig.seed``, so a config reproduces its numbers.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as the tomli package (a dependency there)
    import tomli as tomllib

from ..data import (
    Dataset,
    dirichlet_partition,
    fedmlh_partition,
    frequent_classes,
    iid_partition,
    label_counts,
    load_dataset,
    make_clients,
    one_label_per_client,
)
from ..fl.local import make_optimizer
from ..fl.registry import make_strategy, strategies
from ..fl.server import RunConfig, Server, record_from_json
from ..fl.types import ClientData, RoundRecord, TrainConfig
from ..metrics import communication_summary, inverse_propensity, propensity_params

PARTITIONS = ("fedmlh", "dirichlet", "iid", "one_label")

# Per-algorithm options a run uses unless the config or --option says otherwise: linear models.
# On the shipped data a hidden layer trained a few local epochs per round learns far slower than a
# linear model (Bibtex, 12 rounds: FedAvg P@1 0.020 with a 256-wide layer under SGD, 0.375 linear
# under Adam), and FedMLH's R sub-models then each carry the whole layer (3.7x FedAvg's bytes).
DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "FedAvg": {"hidden": []},
    "FedMLH": {"hidden": []},
    "FedSS": {"hidden": []},
}


class AllClientsFailed(RuntimeError):
    """Every client of a round failed: the run cannot go on (the message lists their reasons)."""


METRIC_FAMILIES = ("P", "nDCG", "PSP", "PSnDCG", "R")  # as ``<family>@<k>`` in the reports


def metric_columns(families: list[str], ks: list[int]) -> list[str]:
    """The results-table columns of ``families`` at every k: ``P@1, P@3, ..., nDCG@1, ...``."""
    return [f"{m}@{k}" for m in families for k in ks]


@dataclass
class ExperimentConfig:
    """Everything a run needs. Field names are the config-file keys and the CLI flags."""

    algorithms: list[str] = field(default_factory=lambda: ["FedAvg", "FedMLH"])
    algorithm_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    dataset: str = "synthetic"
    synthetic: dict[str, Any] = field(default_factory=dict)
    feature_dim: int | None = None
    # unit-norm feature rows (file datasets). False keeps raw values: the FedAwS/FedALC presets on
    # Bibtex need the raw bag of words (unit rows shrink the first layer's steps ~68x: P@1 0.175
    # against 0.309 after 60 rounds, docs/api/fl.md "Reproducing the papers").
    l2_normalize: bool = True
    # keep a file dataset's features as torch.sparse_csr from file to model (partition, local
    # training, evaluation): memory ~ nonzeros, not N x F. The synthetic default is always dense.
    sparse: bool = False
    test_fraction: float = 0.2
    partition: str = "fedmlh"
    num_frequent: int | None = None  # FedMLH split and freq/infreq metrics; default: 10% of classes
    beta: float = 0.5
    clients: int = 10
    clients_per_round: int = 4
    rounds: int = 20
    local_epochs: int = 5
    batch_size: int = 64
    lr: float = 0.01
    optimizer: str = "adam"
    seed: int = 0
    eval_every: int = 1
    ks: list[int] = field(default_factory=lambda: [1, 3, 5])
    # the metric families the results table shows at every k (all are computed and saved)
    metrics: list[str] = field(default_factory=lambda: list(METRIC_FAMILIES))
    # [A, B] of Jain et al.'s propensity model for PSP@k / PSnDCG@k; unset: the dataset's own
    # (fedkernels.metrics.PROPENSITY), 0.55 / 1.5 for datasets not in that table
    propensity: list[float] | None = None
    max_test: int | None = None
    output: str = "fedkernels-out"
    # torch intra-op threads for the run (None: torch's default). On a machine busy with other
    # work, 1 is far faster for these small models: with more, every op waits at a barrier for a
    # descheduled worker (Bibtex, 3 hidden layers: 0.45 s a round with 1 thread, 7-18 s with 2).
    threads: int | None = None
    # a folder of per-algorithm checkpoints written after every round (resumed with resume=True)
    checkpoint: str | None = None
    resume: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field (before any data is loaded)."""
        if not self.algorithms:
            raise ValueError("algorithms must name at least one algorithm")
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {self.partition!r}")
        for name in ("clients", "clients_per_round", "rounds", "batch_size", "eval_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.local_epochs, bool) or not isinstance(self.local_epochs, int) or self.local_epochs < 0:
            raise ValueError(f"local_epochs must be an integer >= 0, got {self.local_epochs!r}")
        if self.partition != "one_label" and self.clients_per_round > self.clients:
            raise ValueError(f"clients_per_round ({self.clients_per_round}) exceeds clients ({self.clients})")
        if not isinstance(self.lr, (int, float)) or not math.isfinite(self.lr) or self.lr <= 0:
            raise ValueError(f"lr must be a finite number > 0, got {self.lr!r}")
        if not isinstance(self.l2_normalize, bool):
            raise ValueError(f"l2_normalize must be true or false, got {self.l2_normalize!r}")
        if not isinstance(self.sparse, bool):
            raise ValueError(f"sparse must be true or false, got {self.sparse!r}")
        if not 0 < self.test_fraction < 1:
            raise ValueError(f"test_fraction must lie in (0, 1), got {self.test_fraction!r}")
        if not self.beta > 0:
            raise ValueError(f"beta must be > 0, got {self.beta!r}")
        for name in ("feature_dim", "num_frequent", "max_test", "threads"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or unset, got {value!r}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks must be positive, got {self.ks}")
        bad = [m for m in self.metrics if m not in METRIC_FAMILIES]
        if bad or not self.metrics:
            raise ValueError(f"metrics must name some of {list(METRIC_FAMILIES)}, got {self.metrics!r}")
        if self.propensity is not None and (
            len(self.propensity) != 2
            or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in self.propensity)
        ):
            raise ValueError(f"propensity must be [A, B] (two finite numbers), got {self.propensity!r}")
        if self.resume and self.checkpoint is None:
            raise ValueError("resume needs checkpoint (the folder the interrupted run wrote)")
        try:  # the optimizer is built by every client; an unknown one would fail each of them
            make_optimizer([torch.zeros(1, requires_grad=True)], self.train_config())
        except ValueError as e:
            raise ValueError(f"optimizer: {e}") from None
        seen: set[str] = set()
        for name in self.algorithms:
            canon = canonical_name(name)
            if canon in seen:
                raise ValueError(f"algorithms lists {canon} twice")
            seen.add(canon)
        for name in self.algorithm_options:
            if canonical_name(name) not in seen:
                raise ValueError(
                    f"algorithm_options has options for {name}, which is not among the algorithms "
                    f"{self.algorithms} (add it to --algorithms or drop its options)"
                )
        for name in self.algorithms:  # unknown names and option keys fail here, before any data is loaded
            make_strategy(name, **self.options_for(name))

    def train_config(self) -> TrainConfig:
        """The clients' local training settings."""
        return TrainConfig(epochs=self.local_epochs, batch_size=self.batch_size, lr=self.lr, optimizer=self.optimizer)

    def options_for(self, name: str) -> dict[str, Any]:
        """The constructor options of algorithm ``name`` (any case): :data:`DEFAULT_OPTIONS` under the
        config's own."""
        canon = canonical_name(name)
        own: dict[str, Any] = {}
        for key, opts in self.algorithm_options.items():
            if canonical_name(key) == canon:
                own.update(opts)
        return {**DEFAULT_OPTIONS.get(canon, {}), **own}


def canonical_name(name: str) -> str:
    """The registered spelling of algorithm ``name`` (matched case-insensitively); unknown names as given."""
    cls = strategies().get(name.lower())
    return cls.name if cls is not None else name


def config_keys() -> set[str]:
    """The keys a config file may set."""
    return {f.name for f in fields(ExperimentConfig)}


def parse_toml(text: str) -> dict[str, Any]:
    """TOML text as a dict (``tomllib``, or ``tomli`` on Python 3.10)."""
    return tomllib.loads(text)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a JSON (``.json``) or TOML (anything else) config file into a dict of fields."""
    path = Path(path)
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else parse_toml(text)
    unknown = sorted(set(data) - config_keys())
    if unknown:
        raise ValueError(f"{path}: unknown config keys {unknown}")
    return data


@dataclass
class PreparedData:
    """The dataset dealt to clients, plus what the metrics need from the training labels."""

    dataset: Dataset
    clients: list[ClientData]
    test: ClientData
    inv_propensity: torch.Tensor
    frequent: torch.Tensor
    test_filter: tuple[torch.Tensor, torch.Tensor] | None = None  # the LF-* filter over self.test's rows


def auto_feature_dim(message: str, cap: int = 1 << 14) -> int | None:
    """The hashed feature width for a dataset the loader refused to densify (its ``ValueError``
    ``message`` names ``N x F``): the largest power of two up to ``cap`` keeping ``N x width`` within
    the loader's dense bound. ``None`` if ``message`` is not that refusal."""
    from ..data.datasets import MAX_DENSE_ELEMENTS

    m = re.search(r"would be (\d+) x (\d+) = \d+ dense elements", message)
    if m is None or "feature_dim=" not in message:
        return None
    n = max(1, int(m.group(1)))
    dim = cap
    while dim > 64 and n * dim > MAX_DENSE_ELEMENTS:
        dim //= 2
    return dim


def prepare_data(cfg: ExperimentConfig) -> PreparedData:
    """Load the dataset and partition its training part as the config says."""
    try:
        ds = load_dataset(
            cfg.dataset,
            seed=cfg.seed,
            feature_dim=cfg.feature_dim,
            test_fraction=cfg.test_fraction,
            l2_normalize=cfg.l2_normalize,
            sparse=cfg.sparse,
            **cfg.synthetic,
        )
    except ValueError as e:
        dim = auto_feature_dim(str(e)) if cfg.feature_dim is None else None
        if dim is None:
            raise
        print(f"note: {e}; hashing the features to {dim} columns (set --feature-dim to choose)", flush=True)
        ds = load_dataset(
            cfg.dataset,
            seed=cfg.seed,
            feature_dim=dim,
            test_fraction=cfg.test_fraction,
            l2_normalize=cfg.l2_normalize,
            sparse=cfg.sparse,
        )
        ds.notes["feature_dim"] = f"{dim} (hashed automatically: too many features to keep dense)"
    tr, p = ds.train, ds.num_classes
    num_frequent = cfg.num_frequent if cfg.num_frequent is not None else max(1, p // 10)
    if cfg.partition == "fedmlh":
        shards = fedmlh_partition(tr.indptr, tr.indices, p, cfg.clients, num_frequent, cfg.seed)
    elif cfg.partition == "dirichlet":
        shards = dirichlet_partition(tr.indptr, tr.indices, p, cfg.clients, cfg.beta, cfg.seed)
    elif cfg.partition == "iid":
        shards = iid_partition(tr.indptr, tr.indices, cfg.clients, cfg.seed)
    else:
        shards = one_label_per_client(tr.indptr, tr.indices, p)
    test, test_filter = ds.test, ds.test_filter
    if cfg.max_test is not None and len(test) > cfg.max_test:
        test = test.rows(torch.arange(cfg.max_test))
        if test_filter is not None:  # the first max_test rows of the filter's CSR
            fp, fi = test_filter
            test_filter = (fp[: cfg.max_test + 1], fi[: int(fp[cfg.max_test])])
    counts = torch.from_numpy(label_counts(tr.indptr, tr.indices, p))
    a, b = cfg.propensity if cfg.propensity is not None else propensity_params(cfg.dataset)
    ds.notes["propensity"] = {"A": a, "B": b, "from": "config" if cfg.propensity is not None else "dataset table"}
    return PreparedData(
        ds,
        make_clients(tr.x, shards, p),
        test,
        inverse_propensity(counts, max(len(tr), 3), a, b),
        torch.from_numpy(frequent_classes(tr.indptr, tr.indices, p, num_frequent)),
        test_filter,
    )


def checkpoint_path(cfg: ExperimentConfig, name: str) -> Path | None:
    """Where algorithm ``name`` checkpoints in ``cfg.checkpoint`` (``None``: no checkpoints)."""
    return None if cfg.checkpoint is None else Path(cfg.checkpoint) / f"{canonical_name(name)}.ckpt"


def check_checkpoints(cfg: ExperimentConfig) -> None:
    """Refuse to start over a checkpoint folder that holds a run unless ``cfg.resume`` says to continue it."""
    if cfg.checkpoint is None or cfg.resume:
        return
    found = [p for p in (checkpoint_path(cfg, a) for a in cfg.algorithms) if p is not None and p.exists()]
    if found:
        raise ValueError(
            f"checkpoint folder {cfg.checkpoint} already holds {', '.join(p.name for p in found)}: "
            "pass --resume to continue that run, or choose another --checkpoint folder"
        )


def run_algorithm(
    name: str, cfg: ExperimentConfig, data: PreparedData, on_round: Callable[[RoundRecord], None] | None = None
) -> dict[str, Any]:
    """Run one algorithm for ``cfg.rounds`` rounds; returns its history, final metrics and bytes.

    With ``cfg.checkpoint`` the server checkpoints after every round (evaluation included) and, with
    ``cfg.resume``, continues from the checkpoint it finds there.

    Raises:
        AllClientsFailed: every client of some round failed (their reasons in the message).
    """
    options = cfg.options_for(name)
    strategy = make_strategy(name, **options)
    per_round = min(cfg.clients_per_round, len(data.clients))
    ckpt = checkpoint_path(cfg, name)
    run_cfg = RunConfig(
        rounds=cfg.rounds,
        clients_per_round=per_round,
        train=cfg.train_config(),
        seed=cfg.seed,
        eval_every=cfg.eval_every,
        eval_k=tuple(cfg.ks),
    )
    t0 = time.perf_counter()
    server = Server(strategy, data.clients, data.dataset.num_features, data.dataset.num_classes, run_cfg)
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        if cfg.resume and ckpt.exists():
            server.load_checkpoint(ckpt)
    resumed_at = server.round
    while server.round < cfg.rounds:
        rec = server.run_round()
        if rec.clients and len(rec.failed) == len(rec.clients):
            reasons = "; ".join(f"client {c}: {why}" for c, why in rec.failed[:3])
            raise AllClientsFailed(
                f"{strategy.name}: every client of round {rec.round + 1} failed ({reasons}"
                + (", ..." if len(rec.failed) > 3 else "")
                + ")"
            )
        if (rec.round + 1) % cfg.eval_every == 0 or rec.round + 1 == cfg.rounds:
            rec.metrics = server.evaluate(
                data.test, tuple(cfg.ks), 2048, data.inv_propensity, data.frequent, data.test_filter
            )
        if ckpt is not None:
            server.save_checkpoint(ckpt)
        if on_round is not None:
            on_round(rec)
    evaluated = [r for r in server.history if r.metrics]
    return {
        "algorithm": strategy.name,
        "options": options,
        "final": evaluated[-1].metrics if evaluated else {},
        "model_bytes": strategy.model_bytes(server.state),
        "seconds": time.perf_counter() - t0,
        "resumed_at_round": resumed_at,
        "failed_clients": sum(len(r.failed) for r in server.history),
        "history": [asdict(r) for r in server.history],
        "comm": communication_summary(server.history, "P@1", strategy.model_bytes(server.state)),
    }


def add_common_target(results: list[dict[str, Any]], metric: str = "P@1") -> float | None:
    """Rounds and bytes each algorithm needed to reach the lowest best ``metric`` among them (a
    level every algorithm reached), stored in each result's ``comm`` as ``*_to_target``."""
    bests = [r["comm"]["best"] for r in results if r["comm"]["best"] is not None]
    if not bests:
        return None
    target = min(bests)
    for r in results:
        s = communication_summary([record_from_json(h) for h in r["history"]], metric, r["model_bytes"], target)
        r["comm"].update(target=target, rounds_to_target=s["rounds_to_target"], bytes_to_target=s["bytes_to_target"])
    return target
