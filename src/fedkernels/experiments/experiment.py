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
from dataclasses import asdict, dataclass, field, fields, replace
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
    primary_label_partition,
    split_statistics,
)
from ..fl.local import make_optimizer
from ..fl.registry import make_strategy, strategies
from ..fl.server import RunConfig, Server, record_from_json
from ..fl.types import ClientData, RoundRecord, TrainConfig
from ..metrics import communication_summary, inverse_propensity, map_at_r
from ..seeding import numpy_rng

PARTITIONS = ("fedmlh", "fedmlh_single", "dirichlet", "iid", "one_label", "primary_label")

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
    max_test: int | None = None
    output: str = "fedkernels-out"
    # torch intra-op threads for the run (None: torch's default). On a machine busy with other
    # work, 1 is far faster for these small models: with more, every op waits at a barrier for a
    # descheduled worker (Bibtex, 3 hidden layers: 0.45 s a round with 1 thread, 7-18 s with 2).
    threads: int | None = None
    # a folder of per-algorithm checkpoints written after every round (resumed with resume=True)
    checkpoint: str | None = None
    resume: bool = False
    # aggregation weight of a client: "samples" (n_k / n, FedAvg's) or "uniform" (1/S over the round's
    # S clients holding data, as the FedMLH paper averages)
    client_weighting: str = "samples"
    # the late-window mean: each metric averaged over the evaluations in the last late_window share of
    # the rounds (single evaluations swing with the clients a round happens to draw)
    late_window: float = 0.25
    # algorithms also run centralised, as the upper bound beside the table: one client holding the whole
    # training set (its original labels, whatever the partition), the same rounds, epochs and options
    centralized: list[str] = field(default_factory=list)
    # > 0: each client keeps this share of its data out of training as its own test set, and every
    # evaluation also ranks each client's held-out rows with the model that client would use
    # (metrics "client-P@k", example-weighted over the clients; see Server.evaluate_clients)
    client_test_fraction: float = 0.0
    # partition "primary_label": samples grouped by their primary label, cut into clients of this many
    client_size: int = 4
    # also evaluate retrieval MAP@R of the strategy's representations (``embed``) on the test set
    retrieval: bool = False

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field (before any data is loaded)."""
        if not self.algorithms:
            raise ValueError("algorithms must name at least one algorithm")
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {self.partition!r}")
        for name in ("clients", "clients_per_round", "rounds", "batch_size", "eval_every", "client_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.local_epochs, bool) or not isinstance(self.local_epochs, int) or self.local_epochs < 0:
            raise ValueError(f"local_epochs must be an integer >= 0, got {self.local_epochs!r}")
        if self.partition not in ("one_label", "primary_label") and self.clients_per_round > self.clients:
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
        if self.resume and self.checkpoint is None:
            raise ValueError("resume needs checkpoint (the folder the interrupted run wrote)")
        if self.client_weighting not in ("samples", "uniform"):
            raise ValueError(f"client_weighting must be 'samples' or 'uniform', got {self.client_weighting!r}")
        if not 0 < self.late_window <= 1:
            raise ValueError(f"late_window must lie in (0, 1], got {self.late_window!r}")
        if not 0 <= self.client_test_fraction < 1:
            raise ValueError(f"client_test_fraction must lie in [0, 1), got {self.client_test_fraction!r}")
        if not isinstance(self.retrieval, bool):
            raise ValueError(f"retrieval must be true or false, got {self.retrieval!r}")
        if not isinstance(self.centralized, list):
            raise ValueError(f"centralized must be a list of algorithm names, got {self.centralized!r}")
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
        for name in self.centralized:
            make_strategy(name, **self.options_for(name))  # an unknown name fails here
        seen |= {canonical_name(n) for n in self.centralized}
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
    """The dataset dealt to clients, plus what the metrics need from the training labels.

    ``held_out`` (with ``client_test_fraction``): each client's own test rows, kept out of ``clients``;
    ``split``: :func:`~fedkernels.data.split_statistics` of the partition (before any hold-out)."""

    dataset: Dataset
    clients: list[ClientData]
    test: ClientData
    inv_propensity: torch.Tensor
    frequent: torch.Tensor
    held_out: list[ClientData] | None = None
    split: dict[str, float] = field(default_factory=dict)


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
    if cfg.partition in ("fedmlh", "fedmlh_single"):
        single = cfg.partition == "fedmlh_single"
        shards = fedmlh_partition(tr.indptr, tr.indices, p, cfg.clients, num_frequent, cfg.seed, single)
    elif cfg.partition == "dirichlet":
        shards = dirichlet_partition(tr.indptr, tr.indices, p, cfg.clients, cfg.beta, cfg.seed)
    elif cfg.partition == "primary_label":
        shards = primary_label_partition(tr.indptr, tr.indices, p, cfg.client_size, cfg.seed)
    elif cfg.partition == "iid":
        shards = iid_partition(tr.indptr, tr.indices, cfg.clients, cfg.seed)
    else:
        shards = one_label_per_client(tr.indptr, tr.indices, p)
    test = ds.test
    if cfg.max_test is not None and len(test) > cfg.max_test:
        test = test.rows(torch.arange(cfg.max_test))
    counts = torch.from_numpy(label_counts(tr.indptr, tr.indices, p))
    clients, held_out = make_clients(tr.x, shards, p), None
    if cfg.client_test_fraction > 0:
        clients, held_out = hold_out_per_client(clients, cfg.client_test_fraction, cfg.seed)
    return PreparedData(
        ds,
        clients,
        test,
        inverse_propensity(counts, max(len(tr), 3)),
        torch.from_numpy(frequent_classes(tr.indptr, tr.indices, p, num_frequent)),
        held_out,
        split_statistics(shards, p),
    )


def hold_out_per_client(
    clients: list[ClientData], fraction: float, seed: int
) -> tuple[list[ClientData], list[ClientData]]:
    """Each client's rows split by a seeded permutation into its training part and its own test part
    (``round(fraction * n)`` rows, at least one when it has two or more)."""
    train, held = [], []
    for c, data in enumerate(clients):
        n = len(data)
        perm = torch.from_numpy(numpy_rng(seed, "client-test", c).permutation(n))
        k = min(n - 1, max(1, round(fraction * n))) if n >= 2 else 0
        held.append(data.rows(torch.sort(perm[:k]).values))
        train.append(data.rows(torch.sort(perm[k:]).values))
    return train, held


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
    if ckpt is not None and strategy.stateful_clients:
        raise ValueError(f"checkpoint: {strategy.name} has stateful clients, which checkpoints do not hold")
    run_cfg = RunConfig(
        rounds=cfg.rounds,
        clients_per_round=per_round,
        train=cfg.train_config(),
        seed=cfg.seed,
        eval_every=cfg.eval_every,
        eval_k=tuple(cfg.ks),
        client_weighting=cfg.client_weighting,
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
            rec.metrics = server.evaluate(data.test, tuple(cfg.ks), 2048, data.inv_propensity, data.frequent)
            if data.held_out is not None:
                rec.metrics.update({f"client-{k}": v for k, v in evaluate_held_out(server, data.held_out, cfg).items()})
            embed = getattr(strategy, "embed", None)
            if cfg.retrieval and embed is not None:
                rec.metrics["MAP@R"] = map_at_r(embed(server.state, data.test.x), data.test.indptr, data.test.indices)
        if ckpt is not None:
            server.save_checkpoint(ckpt)
        if on_round is not None:
            on_round(rec)
    evaluated = [r for r in server.history if r.metrics]
    diagnostics = getattr(strategy, "diagnostics", None)
    return {
        "algorithm": strategy.name,
        "options": options,
        "final": evaluated[-1].metrics if evaluated else {},
        "late": late_window_means(server.history, cfg.late_window, cfg.rounds),
        "best": best_values(server.history),
        "diagnostics": diagnostics(server.state) if diagnostics is not None else {},
        "model_bytes": strategy.model_bytes(server.state),
        "seconds": time.perf_counter() - t0,
        "resumed_at_round": resumed_at,
        "failed_clients": sum(len(r.failed) for r in server.history),
        "history": [asdict(r) for r in server.history],
        "comm": communication_summary(server.history, "P@1", strategy.model_bytes(server.state)),
    }


def evaluate_held_out(server: Server, held_out: list[ClientData], cfg: ExperimentConfig) -> dict[str, float]:
    """The per-client metrics: each client's held-out rows ranked by the model it would use
    (:meth:`~fedkernels.fl.Server.evaluate_clients`); for a run over other clients than the held-out
    sets' (the centralised bound), the global model on every set, weighted by its rows."""
    if len(held_out) == len(server.clients):
        return server.evaluate_clients(held_out, tuple(cfg.ks))
    sums: dict[str, float] = {}
    total = 0
    for data in held_out:
        if not len(data):
            continue
        got = server.evaluate(data, tuple(cfg.ks))
        total += len(data)
        for k, v in got.items():
            sums[k] = sums.get(k, 0.0) + len(data) * v
    return {k: v / total for k, v in sums.items()} if total else {}


def late_window_means(history: list[RoundRecord], window: float, rounds: int) -> dict[str, float]:
    """Each metric's mean over the evaluations in the last ``window`` share of ``rounds`` (at least
    the last evaluation), with ``"evaluations"``: how many that is."""
    start = rounds - max(1, round(window * rounds))
    late = [r.metrics for r in history if r.metrics and r.round >= start]
    if not late:
        evaluated = [r.metrics for r in history if r.metrics]
        late = evaluated[-1:]
    names = sorted({k for m in late for k in m})
    out = {k: sum(m[k] for m in late if k in m) / sum(1 for m in late if k in m) for k in names}
    return {**out, "evaluations": float(len(late))}


def best_values(history: list[RoundRecord]) -> dict[str, float]:
    """Each metric's best (largest) value over the run's evaluations, with ``"round <metric>"``: the
    1-based round it was first reached."""
    out: dict[str, float] = {}
    for r in history:
        for k, v in r.metrics.items():
            if k not in out or v > out[k]:
                out[k], out[f"round {k}"] = v, float(r.round + 1)
    return out


def run_centralized(
    name: str, cfg: ExperimentConfig, data: PreparedData, on_round: Callable[[RoundRecord], None] | None = None
) -> dict[str, Any]:
    """The centralised upper bound of algorithm ``name``: one client holding the whole training set
    with its original labels, every round, with ``cfg``'s rounds, epochs and the algorithm's options.
    The result's ``algorithm`` is ``"<name> (centralized)"``."""
    tr = data.dataset.train
    pooled = ClientData(tr.x, tr.indptr, tr.indices, data.dataset.num_classes)
    # the clients' held-out rows stay out of the pooled training set and rank under the pooled model
    if data.held_out is not None:
        pooled = concat_clients(data.clients)
    one = PreparedData(data.dataset, [pooled], data.test, data.inv_propensity, data.frequent, data.held_out)
    solo = replace(cfg, clients_per_round=1, checkpoint=None)
    result = run_algorithm(name, solo, one, on_round)
    result["algorithm"] = f"{result['algorithm']} (centralized)"
    return result


def concat_clients(clients: list[ClientData]) -> ClientData:
    """The clients' rows stacked into one :class:`ClientData` (dense features)."""
    xs = [c.x.to_dense() if c.x.layout == torch.sparse_csr else c.x for c in clients]
    indptr = [torch.zeros(1, dtype=torch.int64)]
    base = 0
    for c in clients:
        indptr.append(c.indptr[1:] + base)
        base += int(c.indptr[-1])
    return ClientData(torch.cat(xs), torch.cat(indptr), torch.cat([c.indices for c in clients]), clients[0].num_classes)


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
