"""An experiment: several algorithms on one dataset and partition, evaluated per round.

This is what ``fedkernels run`` executes. Everything (data, partition, client sampling, training)
derives from ``ExperimentConfig.seed``, so a config reproduces its numbers.
"""

from __future__ import annotations

import copy
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

from fedkernels_cli.defaults import DEFAULT_OPTIONS, METRIC_FAMILIES, PARTITIONS, RUN_DEFAULTS

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
    load_xc_dataset,
    make_clients,
    one_label_per_client,
    primary_label_partition,
    split_statistics,
)
from ..fl.device import resolve_device
from ..fl.local import AUTOCAST, make_optimizer
from ..fl.registry import make_strategy, strategies
from ..fl.server import RunConfig, Server, record_from_json
from ..fl.strategy import Strategy
from ..fl.types import ClientData, RoundRecord, TrainConfig
from ..metrics import communication_summary, inverse_propensity, map_at_r, propensity_params
from ..seeding import numpy_rng
from .checkpoints import checkpoint_path, run_options
from .limits import check_fields
from .model_memory import check_run_memory
from .names import canonical_name


class AllClientsFailed(RuntimeError):
    """Every client of a round failed: the run cannot go on (the message lists their reasons)."""


def _copy_of(name: str) -> Callable[[], Any]:
    """A ``default_factory`` giving each config its own copy of list or dict default ``name``."""
    return lambda: copy.deepcopy(RUN_DEFAULTS[name])


def metric_columns(families: list[str], ks: list[int]) -> list[str]:
    """The results-table columns of ``families`` at every k: ``P@1, P@3, ..., nDCG@1, ...``."""
    return [f"{m}@{k}" for m in families for k in ks]


@dataclass
class ExperimentConfig:
    """Everything a run needs. Field names are the config-file keys and the CLI flags; the defaults
    are :data:`fedkernels_cli.defaults.RUN_DEFAULTS` (which the CLI's help shows)."""

    algorithms: list[str] = field(default_factory=_copy_of("algorithms"))
    algorithm_options: dict[str, dict[str, Any]] = field(default_factory=_copy_of("algorithm_options"))
    dataset: str = RUN_DEFAULTS["dataset"]
    synthetic: dict[str, Any] = field(default_factory=_copy_of("synthetic"))
    feature_dim: int | None = RUN_DEFAULTS["feature_dim"]
    # unit-norm feature rows (file datasets). False keeps raw values: the FedAwS/FedALC presets on
    # Bibtex need the raw bag of words (unit rows shrink the first layer's steps ~68x: P@1 0.175
    # against 0.309 after 60 rounds, docs/api/fl.md "Reproducing the papers").
    l2_normalize: bool = RUN_DEFAULTS["l2_normalize"]
    # keep a file dataset's features as torch.sparse_csr from file to model (partition, local
    # training, evaluation): memory ~ nonzeros, not N x F. The synthetic default is always dense.
    sparse: bool = RUN_DEFAULTS["sparse"]
    test_fraction: float = RUN_DEFAULTS["test_fraction"]
    partition: str = RUN_DEFAULTS["partition"]
    num_frequent: int | None = RUN_DEFAULTS["num_frequent"]
    beta: float = RUN_DEFAULTS["beta"]
    clients: int = RUN_DEFAULTS["clients"]
    clients_per_round: int = RUN_DEFAULTS["clients_per_round"]
    rounds: int = RUN_DEFAULTS["rounds"]
    local_epochs: int = RUN_DEFAULTS["local_epochs"]
    batch_size: int = RUN_DEFAULTS["batch_size"]
    lr: float = RUN_DEFAULTS["lr"]
    optimizer: str = RUN_DEFAULTS["optimizer"]
    seed: int = RUN_DEFAULTS["seed"]
    eval_every: int = RUN_DEFAULTS["eval_every"]
    ks: list[int] = field(default_factory=_copy_of("ks"))
    # the metric families the results table shows at every k (all are computed and saved)
    metrics: list[str] = field(default_factory=_copy_of("metrics"))
    # [A, B] of Jain et al.'s propensity model for PSP@k / PSnDCG@k; unset: the dataset's own
    # (fedkernels.metrics.PROPENSITY), 0.55 / 1.5 for datasets not in that table
    propensity: list[float] | None = RUN_DEFAULTS["propensity"]
    max_test: int | None = RUN_DEFAULTS["max_test"]
    output: str = RUN_DEFAULTS["output"]
    # torch intra-op threads for the run (None: torch's default). On a machine busy with other
    # work, 1 is far faster for these small models: with more, every op waits at a barrier for a
    # descheduled worker (Bibtex, 3 hidden layers: 0.45 s a round with 1 thread, 7-18 s with 2).
    threads: int | None = RUN_DEFAULTS["threads"]
    # a folder of per-algorithm checkpoints written after every round (resumed with resume=True)
    checkpoint: str | None = RUN_DEFAULTS["checkpoint"]
    resume: bool = RUN_DEFAULTS["resume"]
    # aggregation weight of a client: "samples" (n_k / n, FedAvg's) or "uniform" (1/S over the round's
    # S clients holding data, as the FedMLH paper averages)
    client_weighting: str = RUN_DEFAULTS["client_weighting"]
    # train a round's in-process clients in one batched pass where the algorithm allows it
    # (RunConfig.batch_clients: faster on the CPU, equal to the one-by-one loop up to float rounding)
    batch_clients: bool = RUN_DEFAULTS["batch_clients"]
    # the late-window mean: each metric averaged over the evaluations in the last late_window share of
    # the rounds (single evaluations swing with the clients a round happens to draw)
    late_window: float = RUN_DEFAULTS["late_window"]
    # algorithms also run centralised, as the upper bound beside the table: one client holding the whole
    # training set (its original labels, whatever the partition), the same rounds, epochs and options
    centralized: list[str] = field(default_factory=_copy_of("centralized"))
    # > 0: each client keeps this share of its data out of training as its own test set, and every
    # evaluation also ranks each client's held-out rows with the model that client would use
    # (metrics "client-P@k", example-weighted over the clients; see Server.evaluate_clients)
    client_test_fraction: float = RUN_DEFAULTS["client_test_fraction"]
    # partition "primary_label": samples grouped by their primary label, cut into clients of this many
    client_size: int = RUN_DEFAULTS["client_size"]
    # also evaluate retrieval MAP@R of the strategy's representations (``embed``) on the test set
    retrieval: bool = RUN_DEFAULTS["retrieval"]
    # where training, the server's state and evaluation run: "cpu", "cuda" or "cuda:N" (fedkernels.fl.device)
    device: str = RUN_DEFAULTS["device"]
    # mixed precision of local training's forward pass: "off" or "bf16" (fedkernels.fl.local.autocast)
    autocast: str = RUN_DEFAULTS["autocast"]
    # privacy (fedkernels.fl.privacy, docs/api/privacy.md): SecAgg+ secure aggregation, client-level DP
    # (clip + noise multiplier, or a target epsilon at dp_delta),
    # sample-level DP-SGD in local training
    secagg: bool = RUN_DEFAULTS["secagg"]
    secagg_dropouts: int | None = RUN_DEFAULTS["secagg_dropouts"]
    secagg_bits: int = RUN_DEFAULTS["secagg_bits"]
    secagg_bound: float = RUN_DEFAULTS["secagg_bound"]
    secagg_degree: int | None = RUN_DEFAULTS["secagg_degree"]
    # the SecAgg+ threat model (docs/api/privacy.md): colluding and dropping-out shares of a round's
    # clients, from which the graph is chosen; a client's weight cap in weighted secure rounds
    secagg_corrupt_fraction: float = RUN_DEFAULTS["secagg_corrupt_fraction"]
    secagg_dropout_fraction: float = RUN_DEFAULTS["secagg_dropout_fraction"]
    secagg_weight_cap: float = RUN_DEFAULTS["secagg_weight_cap"]
    # L1Diff in private rounds: every K-th round dense, the K - 1 between one value per public segment
    l1diff_segments: int = RUN_DEFAULTS["l1diff_segments"]
    dp_clip: float | None = RUN_DEFAULTS["dp_clip"]
    dp_noise: float | None = RUN_DEFAULTS["dp_noise"]
    target_epsilon: float | None = RUN_DEFAULTS["target_epsilon"]
    dp_delta: float = RUN_DEFAULTS["dp_delta"]
    dp_mechanism: str = RUN_DEFAULTS["dp_mechanism"]
    # DP noise, the DP sample and DP-SGD's batches from the run seed: a reproducible simulation, not private
    dp_seeded: bool = RUN_DEFAULTS["dp_seeded"]
    dp_sample_clip: float | None = RUN_DEFAULTS["dp_sample_clip"]
    dp_sample_noise: float = RUN_DEFAULTS["dp_sample_noise"]

    def __post_init__(self) -> None:
        # Algorithm names are resolved here, once, for the CLI and the Python API alike: every layer
        # below keys by the registered spelling (a name of another type is left for validate to refuse).
        if isinstance(self.algorithms, list):
            self.algorithms = [canonical_name(a) if isinstance(a, str) else a for a in self.algorithms]
        if isinstance(self.centralized, list):
            self.centralized = [canonical_name(a) if isinstance(a, str) else a for a in self.centralized]
        if isinstance(self.algorithm_options, dict):
            merged: dict[str, Any] = {}
            for key, opts in self.algorithm_options.items():
                canon = canonical_name(key) if isinstance(key, str) else key
                if isinstance(opts, dict) and isinstance(merged.get(canon), dict):
                    merged[canon] = {**merged[canon], **opts}
                else:
                    merged[canon] = opts
            self.algorithm_options = merged

    def validate(self) -> dict[str, Strategy]:
        """Raise ``ValueError`` naming the first bad field (before any data is loaded): every field's
        type and range (:func:`~fedkernels.experiments.limits.check_fields`), then their relations.

        Returns:
            the strategy of every algorithm and centralised algorithm, keyed by its registered name,
            built from :meth:`options_for` and checked: a run uses these objects
            (:func:`~fedkernels.experiments.strategies.run_strategy`) rather than building its own.
        """
        check_fields(self)
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
        try:  # a GPU that is not there is refused here, before any data is read
            resolve_device(self.device)
        except ValueError as e:
            raise ValueError(f"device (--device): {e}") from None
        if self.autocast not in AUTOCAST:
            raise ValueError(f"autocast (--autocast) must be one of {AUTOCAST}, got {self.autocast!r}")
        try:  # the optimizer is built by every client; an unknown one would fail each of them
            make_optimizer([torch.zeros(1, requires_grad=True)], self.train_config())
        except ValueError as e:
            raise ValueError(f"optimizer: {e}") from None
        seen: set[str] = set()
        for name in self.algorithms:  # registered spellings since __post_init__
            if name in seen:
                raise ValueError(f"algorithms lists {name} twice")
            seen.add(name)
        built: dict[str, Strategy] = {}
        for name in self.centralized:
            built[name] = make_strategy(name, **self.options_for(name))  # an unknown name fails here
        seen |= set(built)
        for name in self.algorithm_options:
            if name not in seen:
                raise ValueError(
                    f"algorithm_options has options for {name}, which is not among the algorithms "
                    f"{self.algorithms} (add it to --algorithms or drop its options)"
                )
        for name in self.algorithms:  # unknown names and option keys fail here, before any data is loaded
            check_option_types(name, self.options_for(name))
            built[name] = make_strategy(name, **self.options_for(name))
        check_privacy(self, built)
        check_run_memory(self, built.values())  # the models against the machine, from the declared sizes
        return built

    def private(self) -> bool:
        """Whether the run's rounds are private (secure aggregation or client-level DP)."""
        return self.secagg or self.dp_clip is not None

    def train_config(self) -> TrainConfig:
        """The clients' local training settings."""
        return TrainConfig(
            epochs=self.local_epochs,
            batch_size=self.batch_size,
            lr=self.lr,
            optimizer=self.optimizer,
            autocast=self.autocast,
            dp_sample_clip=self.dp_sample_clip,
            dp_sample_noise=self.dp_sample_noise,
            dp_sample_seeded=self.dp_seeded,
        )

    def run_config(
        self,
        *,
        clients_per_round: int | None = None,
        checkpoint: str | None = None,
        client_timeout: float | None = None,
        max_upload_bytes: int | None = None,
        eval_clients: int | None = None,
        weight_decay: float = 0.0,
    ) -> RunConfig:
        """The federated loop's :class:`~fedkernels.fl.RunConfig` for this run: the one place a
        ``RunConfig`` is built (``python_tests/experiments/test_run_description.py`` checks it). The
        arguments are what a run knows beyond this config: the clients a round really draws (fewer when
        the partition made fewer clients), the checkpoint file, and the Flower-only settings (a client's
        timeout in seconds, a tighter upload bound in bytes, the clients of a federated evaluation, local
        training's weight decay)."""
        return RunConfig(
            rounds=self.rounds,
            clients_per_round=self.clients_per_round if clients_per_round is None else clients_per_round,
            train=replace(self.train_config(), weight_decay=weight_decay),
            seed=self.seed,
            eval_every=self.eval_every,
            eval_k=tuple(self.ks),
            client_weighting=self.client_weighting,
            device=self.device,
            batch_clients=self.batch_clients,
            sample_delta=self.dp_delta,
            checkpoint=checkpoint,
            client_timeout=client_timeout,
            max_upload_bytes=max_upload_bytes,
            eval_clients=eval_clients,
        )

    def options_for(self, name: str) -> dict[str, Any]:
        """The constructor options of algorithm ``name`` (any case; the config keys them by registered
        name): :data:`DEFAULT_OPTIONS` under the config's own."""
        folded = name.casefold()
        defaults = next((v for k, v in DEFAULT_OPTIONS.items() if k.casefold() == folded), {})
        return {**defaults, **next((v for k, v in self.algorithm_options.items() if k.casefold() == folded), {})}


def check_option_types(name: str, options: dict[str, Any]) -> None:
    """Each option of algorithm ``name`` against its constructor default's type: an int option takes
    an int, a float option a finite number, a sequence of ints (layer widths such as ``hidden``)
    a list of ints >= 1, a bool option true or false.

    Raises:
        ValueError: naming ``ALG.option`` and what it must be.
    """
    import inspect

    cls = strategies().get(name.lower())
    if cls is None:
        return  # make_strategy names the unknown algorithm
    defaults: dict[str, Any] = {}
    takes_text: set[str] = set()  # options annotated to take a string too (L1DiffNetwork.p = "inf")
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            for key, param in inspect.signature(init).parameters.items():
                if param.default is not inspect.Parameter.empty:
                    defaults.setdefault(key, param.default)
                    if "str" in str(param.annotation).replace("|", " ").split():
                        takes_text.add(key)
    for key, value in options.items():
        if key not in defaults or (key in takes_text and isinstance(value, str)):
            continue  # unknown keys: the constructor names them; text values: the constructor checks them
        d, where = defaults[key], f"{cls.name}.{key}"
        if isinstance(d, bool):
            ok, want = isinstance(value, bool), "true or false"
        elif isinstance(d, int):
            ok, want = isinstance(value, int) and not isinstance(value, bool), "an integer"
        elif isinstance(d, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            want = "a finite number"
        elif isinstance(d, (tuple, list)) and all(isinstance(x, int) and not isinstance(x, bool) for x in d):
            ok = isinstance(value, (tuple, list)) and all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= 1 << 24 for x in value
            )
            want = "a list of integers in [1, 2**24] (layer widths)"
        else:
            continue
        if not ok:
            raise ValueError(f"{where} must be {want}, got {value!r:.80}")


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
    test_filter: tuple[torch.Tensor, torch.Tensor] | None = None  # the LF-* filter over self.test's rows


def auto_feature_dim(message: str, cap: int = 1 << 14) -> int | None:
    """The hashed feature width for a dataset the loader refused to densify (its ``ValueError``
    ``message`` names ``N x F``): the largest power of two up to ``cap`` keeping ``N x width`` within
    the loader's dense bound. ``None`` if ``message`` is not that refusal."""
    from ..data.datasets import dense_width

    m = re.search(r"would be (\d+) x (\d+) = \d+ dense elements", message)
    if m is None or "feature_dim=" not in message:
        return None
    return dense_width(int(m.group(1)), cap)


def _load(cfg: ExperimentConfig, feature_dim: int | None) -> Dataset:
    """The dataset of a resolved config: synthetic, or the located path read as it is (never looked up)."""
    if cfg.dataset == "synthetic":
        return load_dataset("synthetic", seed=cfg.seed, test_fraction=cfg.test_fraction, **cfg.synthetic)
    return load_xc_dataset(
        Path(cfg.dataset), feature_dim, cfg.seed, cfg.test_fraction, l2_normalize=cfg.l2_normalize, sparse=cfg.sparse
    )


def prepare_data(cfg: ExperimentConfig) -> PreparedData:
    """Load the dataset and partition its training part as the config says. ``cfg.dataset`` is
    ``"synthetic"`` or a located path (:func:`~fedkernels.experiments.resolve.resolve_run`)."""
    try:
        ds = _load(cfg, cfg.feature_dim)
    except ValueError as e:
        dim = auto_feature_dim(str(e)) if cfg.feature_dim is None else None
        if dim is None:
            raise
        print(f"note: {e}; hashing the features to {dim} columns (set --feature-dim to choose)", flush=True)
        ds = _load(cfg, dim)
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
    test, test_filter = ds.test, ds.test_filter
    if cfg.max_test is not None and len(test) > cfg.max_test:
        test = test.rows(torch.arange(cfg.max_test))
        if test_filter is not None:  # the first max_test rows of the filter's CSR
            fp, fi = test_filter
            test_filter = (fp[: cfg.max_test + 1], fi[: int(fp[cfg.max_test])])
    counts = torch.from_numpy(label_counts(tr.indptr, tr.indices, p))
    clients, held_out = make_clients(tr.x, shards, p), None
    if cfg.client_test_fraction > 0:
        clients, held_out = hold_out_per_client(clients, cfg.client_test_fraction, cfg.seed)
    a, b = cfg.propensity if cfg.propensity is not None else propensity_params(cfg.dataset)
    ds.notes["propensity"] = {"A": a, "B": b, "from": "config" if cfg.propensity is not None else "dataset table"}
    return PreparedData(
        ds,
        clients,
        test,
        inverse_propensity(counts, max(len(tr), 3), a, b),
        torch.from_numpy(frequent_classes(tr.indptr, tr.indices, p, num_frequent)),
        held_out,
        split_statistics(shards, p),
        test_filter,
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


def redact_secrets(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as results may record them: a ``client_secret`` becomes its one-way key id."""
    from ..fl.labelsets import check_secret, key_id

    out = dict(options)
    if "client_secret" in out:
        try:
            out["client_secret"] = f"<redacted; key id {key_id(check_secret(out['client_secret']))}>"
        except ValueError:
            out["client_secret"] = "<redacted>"
    return out


def run_algorithm(
    name: str,
    cfg: ExperimentConfig,
    data: PreparedData,
    on_round: Callable[[RoundRecord], None] | None = None,
    on_resume: Callable[[list[RoundRecord]], None] | None = None,
    strategy: Strategy | None = None,
) -> dict[str, Any]:
    """Run one algorithm for ``cfg.rounds`` rounds; returns its history, final metrics and bytes.

    With ``cfg.checkpoint`` the server checkpoints after every round (evaluation included) and, with
    ``cfg.resume``, continues from the checkpoint it finds there; ``on_resume`` then gets the rounds
    the checkpoint holds (a progress display starts from them), ``on_round`` each new round.
    ``strategy`` is the algorithm's object (default: built here from
    :func:`~fedkernels.experiments.checkpoints.run_options`).

    Raises:
        AllClientsFailed: every client of some round failed (their reasons in the message).
        ValueError: ``cfg.checkpoint`` already holds this algorithm's checkpoint and ``cfg.resume``
            is not set (a run never overwrites one).
    """
    options = run_options(name, cfg)
    if strategy is None:
        strategy = make_strategy(name, **options)
    per_round = min(cfg.clients_per_round, len(data.clients))
    ckpt = checkpoint_path(cfg, name)
    if ckpt is not None and strategy.stateful_clients:
        # what its clients kept is in no checkpoint, so a resumed run would differ: never resumed, never
        # saved (the CLI checkpoints every run by default; this algorithm then runs without)
        if cfg.resume and ckpt.exists():
            raise ValueError(f"checkpoint: {strategy.name} has stateful clients, which checkpoints do not hold")
        print(
            f"{strategy.name}: stateful clients (their kept tensors are in no checkpoint): runs without a checkpoint",
            file=sys.stderr,
        )
        ckpt = None
    resuming = ckpt is not None and ckpt.exists()
    if resuming and not cfg.resume:
        raise ValueError(f"checkpoint {ckpt} exists: pass --resume to continue that run, or choose another folder")
    # the server resumes from the checkpoint and saves every round
    run_cfg = cfg.run_config(clients_per_round=per_round, checkpoint=None if ckpt is None else str(ckpt))
    t0 = time.perf_counter()
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
    if cfg.private():
        from ..fl.privacy import PrivateServer

        server: Server = PrivateServer(
            strategy, data.clients, data.dataset.num_features, data.dataset.num_classes, run_cfg, privacy_config(cfg)
        )
    else:
        server = Server(strategy, data.clients, data.dataset.num_features, data.dataset.num_classes, run_cfg)
    if resuming and on_resume is not None:
        on_resume(server.history)
    resumed_at = server.round
    server.run(on_round=on_round, after_round=lambda rec: _after_round(server, rec, cfg, data))
    evaluated = [r for r in server.history if r.metrics]
    privacy = server.history[-1].privacy if server.history else {}
    return {
        "privacy": privacy,
        "algorithm": strategy.name,
        "options": redact_secrets(options),
        "final": evaluated[-1].metrics if evaluated else {},
        "late": late_window_means(server.history, cfg.late_window, cfg.rounds),
        "best": best_values(server.history),
        "diagnostics": strategy.diagnostics(server.state),
        "model_bytes": strategy.model_bytes(server.state),
        "seconds": time.perf_counter() - t0,
        "resumed_at_round": resumed_at,
        "failed_clients": sum(len(r.failed) for r in server.history),
        "history": [asdict(r) for r in published_history(server.history, cfg)],
        "comm": communication_summary(server.history, "P@1", strategy.model_bytes(server.state)),
    }


def published_history(history: list[RoundRecord], cfg: ExperimentConfig) -> list[RoundRecord]:
    """The rounds as a run's result files may show them: under client-level DP a round's sample is
    secret, so its client ids and the counts that reveal how many took part are left out
    (:func:`~fedkernels.fl.privacy.mechanism.published_record`)."""
    if cfg.dp_clip is None:
        return history
    from ..fl.privacy.mechanism import published_record

    return [published_record(r) for r in history]


def _after_round(server: Server, rec: RoundRecord, cfg: ExperimentConfig, data: PreparedData) -> None:
    """An experiment's work on each round before it is checkpointed: stop when every client failed,
    and evaluate every ``eval_every`` rounds and at the last (the server accounts privacy itself)."""
    if rec.clients and len(rec.failed) == len(rec.clients):
        reasons = "; ".join(f"client {c}: {why}" for c, why in rec.failed[:3])
        raise AllClientsFailed(
            f"{server.strategy.name}: every client of round {rec.round + 1} failed ({reasons}"
            + (", ..." if len(rec.failed) > 3 else "")
            + ")"
        )
    if (rec.round + 1) % cfg.eval_every == 0 or rec.round + 1 == cfg.rounds:
        rec.metrics = server.evaluate(
            data.test, tuple(cfg.ks), 2048, data.inv_propensity, data.frequent, data.test_filter
        )
        if data.held_out is not None:
            rec.metrics.update({f"client-{k}": v for k, v in evaluate_held_out(server, data.held_out, cfg).items()})
        embedded = server.strategy.embed(server.state, data.test.x.to(server.device)) if cfg.retrieval else None
        if embedded is not None:
            rec.metrics["MAP@R"] = map_at_r(embedded.cpu(), data.test.indptr, data.test.indices)


def evaluate_held_out(server: Server, held_out: list[ClientData], cfg: ExperimentConfig) -> dict[str, float]:
    """The per-client metrics: each client's held-out rows ranked by the model it would use
    (:meth:`~fedkernels.fl.Server.evaluate_clients`); for a run over other clients than the held-out
    sets' (the centralised bound), the global model on every set, weighted by its rows. Under secure
    aggregation every client ranks its own set and the reports are summed by SecAgg+
    (:meth:`~fedkernels.fl.privacy.PrivateServer.evaluate_federated`): no report leaves a client alone."""
    if len(held_out) == len(server.clients):
        if getattr(getattr(server, "privacy", None), "secagg", False):
            return server.evaluate_federated(held_out, tuple(cfg.ks))[0]
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
    name: str,
    cfg: ExperimentConfig,
    data: PreparedData,
    on_round: Callable[[RoundRecord], None] | None = None,
    strategy: Strategy | None = None,
) -> dict[str, Any]:
    """The centralised upper bound of algorithm ``name``: one client holding the whole training set
    with its original labels, every round, with ``cfg``'s rounds, epochs and the algorithm's options.
    The result's ``algorithm`` is ``"<name> (centralized)"``."""
    tr = data.dataset.train
    pooled = ClientData(tr.x, tr.indptr, tr.indices, data.dataset.num_classes)
    # the clients' held-out rows stay out of the pooled training set and rank under the pooled model
    if data.held_out is not None:
        pooled = concat_clients(data.clients)
    one = PreparedData(
        data.dataset,
        [pooled],
        data.test,
        data.inv_propensity,
        data.frequent,
        data.held_out,
        data.split,
        data.test_filter,
    )
    solo = replace(cfg, clients_per_round=1, checkpoint=None)
    result = run_algorithm(name, solo, one, on_round, strategy=strategy)
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


def check_privacy(cfg: ExperimentConfig, built: dict[str, Strategy]) -> None:
    """Validate the privacy settings (before any data is read) with the validator every path uses
    (:func:`~fedkernels.fl.privacy_settings.privacy_settings`), then against the strategies ``built``
    for ``cfg``'s algorithms (keyed by registered name); ValueError names the field."""
    from ..fl.privacy_settings import SETTINGS, check_strategy_dp, privacy_settings

    values = {name: getattr(cfg, name) for name in SETTINGS}
    if not (cfg.private() or cfg.dp_sample_clip is not None):
        privacy_settings(values)  # the values are checked all the same
        return
    try:
        from ..fl import privacy  # noqa: F401  (the optional extra)
    except ImportError as e:
        raise ValueError(f"privacy options need the extra fedkernels[privacy] ({e})") from None
    from ..fl.privacy.server import check_private

    settings = privacy_settings(values, clients_per_round=_session_size(cfg), seed=cfg.seed)
    for strategy in built.values():  # the centralised bounds run with the same privacy
        check_strategy_dp(strategy, cfg.dp_clip is not None, cfg.dp_sample_clip is not None)
    if cfg.l1diff_segments and "L1Diff" not in cfg.algorithms:
        raise ValueError("l1diff_segments applies to L1Diff, which the run does not have")
    if settings.privacy is not None:
        for name in cfg.algorithms:
            # L1DiffNetwork is refused here, and SecAgg+ settings no graph makes secure and correct
            check_private(built[name], settings.privacy, _session_size(cfg))


def _session_size(cfg: ExperimentConfig) -> int:
    """The clients of a round (a secure-aggregation session): the partitions that make one client per
    label set ``clients`` themselves."""
    if cfg.partition in ("one_label", "primary_label"):
        return cfg.clients_per_round
    return min(cfg.clients_per_round, cfg.clients)


def privacy_config(cfg: ExperimentConfig):
    """The :class:`~fedkernels.fl.privacy.PrivacyConfig` of a run (None: its rounds are not private)."""
    from ..fl.privacy_settings import SETTINGS, privacy_settings

    return privacy_settings({name: getattr(cfg, name) for name in SETTINGS}, seed=cfg.seed).privacy
