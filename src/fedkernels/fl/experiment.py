"""An experiment: several algorithms on one dataset and partition, evaluated per round.

This is what ``fedkernels run`` executes. Everything (data, partition, client sampling, training)
derives from ``ExperimentConfig.seed``, so a config reproduces its numbers.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib
import torch

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
from ..metrics import communication_summary, inverse_propensity, ranking_metrics
from ..sparse_rows import slice_rows
from .registry import make_strategy
from .server import RunConfig, Server
from .strategy import Strategy
from .types import ClientData, RoundRecord, TrainConfig

PARTITIONS = ("fedmlh", "dirichlet", "iid", "one_label")


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
    test_fraction: float = 0.2
    partition: str = "fedmlh"
    num_frequent: int | None = None  # FedMLH split and freq/infreq metrics; default: 10% of classes
    beta: float = 0.5
    clients: int = 10
    clients_per_round: int = 4
    rounds: int = 20
    local_epochs: int = 1
    batch_size: int = 64
    lr: float = 0.1
    optimizer: str = "sgd"
    seed: int = 0
    eval_every: int = 1
    ks: list[int] = field(default_factory=lambda: [1, 3, 5])
    max_test: int | None = None
    output: str = "fedkernels-out"
    # torch intra-op threads for the run (None: torch's default). On a machine busy with other
    # work, 1 is far faster for these small models: with more, every op waits at a barrier for a
    # descheduled worker (Bibtex, 3 hidden layers: 0.45 s a round with 1 thread, 7-18 s with 2).
    threads: int | None = None

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        if not self.algorithms:
            raise ValueError("algorithms must name at least one algorithm")
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {self.partition!r}")
        for name in ("clients", "clients_per_round", "rounds", "batch_size", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.local_epochs < 0:
            raise ValueError(f"local_epochs must be >= 0, got {self.local_epochs}")
        if self.partition != "one_label" and self.clients_per_round > self.clients:
            raise ValueError(f"clients_per_round ({self.clients_per_round}) exceeds clients ({self.clients})")
        if not isinstance(self.l2_normalize, bool):
            raise ValueError(f"l2_normalize must be true or false, got {self.l2_normalize!r}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 or None, got {self.threads}")
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks must be positive, got {self.ks}")
        for name in self.algorithms:  # fail before any data is loaded
            make_strategy(name, **self.algorithm_options.get(name, {}))


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a JSON (``.json``) or TOML (anything else) config file into a dict of fields."""
    path = Path(path)
    text = path.read_text()
    data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    unknown = sorted(set(data) - {f.name for f in fields(ExperimentConfig)})
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


def prepare_data(cfg: ExperimentConfig) -> PreparedData:
    """Load the dataset and partition its training part as the config says."""
    ds = load_dataset(
        cfg.dataset,
        seed=cfg.seed,
        feature_dim=cfg.feature_dim,
        test_fraction=cfg.test_fraction,
        l2_normalize=cfg.l2_normalize,
        **cfg.synthetic,
    )
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
    test = ds.test
    if cfg.max_test is not None and len(test) > cfg.max_test:
        test = test.rows(torch.arange(cfg.max_test))
    counts = torch.from_numpy(label_counts(tr.indptr, tr.indices, p))
    return PreparedData(
        ds,
        make_clients(tr.x, shards, p),
        test,
        inverse_propensity(counts, max(len(tr), 3)),
        torch.from_numpy(frequent_classes(tr.indptr, tr.indices, p, num_frequent)),
    )


def evaluate(strategy: Strategy, state: dict, data: PreparedData, ks: list[int], batch: int = 2048) -> dict[str, float]:
    """P@k, nDCG@k, PSP@k, frequent/infrequent P@k and MAP of the global model on the test set."""
    test = data.test
    kmax = min(max(ks), test.num_classes)
    preds = [strategy.predict_topk(state, slice_rows(test.x, i, i + batch), kmax) for i in range(0, len(test), batch)]
    topk = torch.cat(preds) if preds else torch.empty(0, kmax, dtype=torch.int64)
    return ranking_metrics(
        topk, test.indptr, test.indices, tuple(k for k in ks if k <= kmax), data.inv_propensity, data.frequent
    )


def run_algorithm(
    name: str, cfg: ExperimentConfig, data: PreparedData, on_round: Callable[[RoundRecord], None] | None = None
) -> dict[str, Any]:
    """Run one algorithm for ``cfg.rounds`` rounds; returns its history, final metrics and bytes."""
    strategy = make_strategy(name, **cfg.algorithm_options.get(name, {}))
    train = TrainConfig(epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=cfg.lr, optimizer=cfg.optimizer)
    per_round = min(cfg.clients_per_round, len(data.clients))
    run_cfg = RunConfig(
        rounds=cfg.rounds,
        clients_per_round=per_round,
        train=train,
        seed=cfg.seed,
        eval_every=cfg.eval_every,
        eval_k=tuple(cfg.ks),
    )
    t0 = time.perf_counter()
    server = Server(strategy, data.clients, data.dataset.num_features, data.dataset.num_classes, run_cfg)

    def after_round(rec: RoundRecord) -> None:
        if (rec.round + 1) % cfg.eval_every == 0 or rec.round + 1 == cfg.rounds:
            rec.metrics = evaluate(strategy, server.state, data, cfg.ks)
        if on_round is not None:
            on_round(rec)

    server.run(None, after_round)
    evaluated = [r for r in server.history if r.metrics]
    return {
        "algorithm": strategy.name,
        "final": evaluated[-1].metrics if evaluated else {},
        "model_bytes": strategy.model_bytes(server.state),
        "seconds": time.perf_counter() - t0,
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
        s = communication_summary([_record(h) for h in r["history"]], metric, r["model_bytes"], target)
        r["comm"].update(target=target, rounds_to_target=s["rounds_to_target"], bytes_to_target=s["bytes_to_target"])
    return target


def _record(h: dict[str, Any]) -> RoundRecord:
    return RoundRecord(**h)
