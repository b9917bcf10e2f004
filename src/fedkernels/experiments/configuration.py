"""A run's configuration: :class:`ExperimentConfig` (every field a config-file key and a CLI flag), its
checks, the config files, and the one place a :class:`~fedkernels.fl.RunConfig` is built
(:meth:`ExperimentConfig.run_config`). Reads no data: the dataset is located by
:mod:`fedkernels.experiments.resolve` and read by :mod:`fedkernels.experiments.preparation`.
"""

from __future__ import annotations

import copy
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from fedkernels_cli.defaults import DEFAULT_OPTIONS, METRIC_FAMILIES, PARTITIONS, RUN_DEFAULTS

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as the tomli package (a dependency there)
    import tomli as tomllib

from ..fl.device import resolve_device
from ..fl.local import AUTOCAST, make_optimizer
from ..fl.registry import build_strategy, strategy_class
from ..fl.server import RunConfig
from ..fl.strategy import Strategy
from ..fl.types import TrainConfig
from .limits import check_fields
from .model_memory import check_run_memory
from .names import canonical_name


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
    """The algorithms to run, by registered name (any case here: the config spells them as registered)."""
    algorithm_options: dict[str, dict[str, Any]] = field(default_factory=_copy_of("algorithm_options"))
    """Constructor options by algorithm (over :data:`fedkernels_cli.defaults.DEFAULT_OPTIONS`)."""
    dataset: str = RUN_DEFAULTS["dataset"]
    """``"synthetic"``, a file or folder (XC, libsvm, ``.npz``), or a dataset name looked up in the data
    folders; a resolved config (:func:`~fedkernels.experiments.resolve.resolve_run`) holds the located path."""
    synthetic: dict[str, Any] = field(default_factory=_copy_of("synthetic"))
    """Arguments of :func:`fedkernels.data.synthetic_multilabel` for the synthetic dataset."""
    feature_dim: int | None = RUN_DEFAULTS["feature_dim"]
    """Hash a file dataset's features to this many columns (unset: keep them, hashed automatically when too
    wide to keep dense)."""
    l2_normalize: bool = RUN_DEFAULTS["l2_normalize"]
    """Unit-norm feature rows (file datasets). False keeps raw values: the FedAwS/FedALC presets on Bibtex
    need the raw bag of words (unit rows shrink the first layer's steps, docs/experiments.md "Reproducing the
    papers")."""
    sparse: bool = RUN_DEFAULTS["sparse"]
    """Keep a file dataset's features as ``torch.sparse_csr`` from file to model (partition, local training,
    evaluation): memory grows with the nonzeros, not N x F. The synthetic default is always dense."""
    test_fraction: float = RUN_DEFAULTS["test_fraction"]
    """The share of the samples held out as the test set (datasets without an official test split)."""
    partition: str = RUN_DEFAULTS["partition"]
    """How the training set is dealt to clients: fedmlh, fedmlh_single, dirichlet, dirichlet_sample (each
    client samples with replacement, so clients overlap: :func:`fedkernels.data.dirichlet_sample_partition`),
    iid, one_label or primary_label."""
    num_frequent: int | None = RUN_DEFAULTS["num_frequent"]
    """The frequent classes (FedMLH's split, the freq/infreq metrics); unset: 10% of the classes."""
    beta: float = RUN_DEFAULTS["beta"]
    """Dirichlet concentration (partitions ``dirichlet`` and ``dirichlet_sample``)."""
    sample_fraction: float = RUN_DEFAULTS["sample_fraction"]
    """Partition ``dirichlet_sample``: the share of the training set each client draws (with replacement;
    0.75 as in the partial-exchange authors' config)."""
    clients: int = RUN_DEFAULTS["clients"]
    """Number of clients."""
    clients_per_round: int = RUN_DEFAULTS["clients_per_round"]
    """Clients sampled per round."""
    rounds: int = RUN_DEFAULTS["rounds"]
    """Federated rounds."""
    local_epochs: int = RUN_DEFAULTS["local_epochs"]
    """Local epochs per round."""
    batch_size: int = RUN_DEFAULTS["batch_size"]
    """Local minibatch size."""
    lr: float = RUN_DEFAULTS["lr"]
    """Local learning rate."""
    optimizer: str = RUN_DEFAULTS["optimizer"]
    """Local optimizer: ``"sgd"`` or ``"adam"``."""
    seed: int = RUN_DEFAULTS["seed"]
    """The run's one seed: data, partition, client sampling and training derive from it."""
    eval_every: int = RUN_DEFAULTS["eval_every"]
    """Evaluate every this many rounds (and after the last)."""
    ks: list[int] = field(default_factory=_copy_of("ks"))
    """The k of P@k and the other ranking metrics."""
    metrics: list[str] = field(default_factory=_copy_of("metrics"))
    """The metric families the results table shows at every k (all are computed and saved)."""
    propensity: list[float] | None = RUN_DEFAULTS["propensity"]
    """``[A, B]`` of Jain et al.'s propensity model for PSP@k / PSnDCG@k; unset: the dataset's own
    (:data:`fedkernels.metrics.PROPENSITY`), 0.55 / 1.5 for datasets not in that table."""
    max_test: int | None = RUN_DEFAULTS["max_test"]
    """Evaluate on at most this many test samples (unset: all)."""
    output: str = RUN_DEFAULTS["output"]
    """The output folder (JSON, CSV, PNG)."""
    threads: int | None = RUN_DEFAULTS["threads"]
    """Torch intra-op threads for the run (None: torch's default, one per core). The default is 1: the
    loop's ops are small, and on a machine busy with other work more threads spend their time waiting at
    each op's barrier for a descheduled partner; one thread also gives the same results on every
    machine (more may change the rounding of torch's own reductions). More can pay for large models on
    an idle machine (docs/install.md, "Threads")."""
    checkpoint: str | None = RUN_DEFAULTS["checkpoint"]
    """A folder of per-algorithm checkpoints written after every round (resumed with ``resume``)."""
    resume: bool = RUN_DEFAULTS["resume"]
    """Continue the run checkpointed in ``checkpoint``."""
    client_weighting: str = RUN_DEFAULTS["client_weighting"]
    """Aggregation weight of a client: ``"samples"`` (n_k / n, FedAvg's) or ``"uniform"`` (1/S over the
    round's S clients holding data, as the FedMLH paper averages)."""
    batch_clients: bool = RUN_DEFAULTS["batch_clients"]
    """Train a round's in-process clients in one batched pass where the algorithm allows it
    (:attr:`RunConfig.batch_clients <fedkernels.fl.RunConfig.batch_clients>`: faster on the CPU, equal to
    the one-by-one loop up to float rounding)."""
    late_window: float = RUN_DEFAULTS["late_window"]
    """The late-window mean: each metric averaged over the evaluations in the last ``late_window`` share of
    the rounds (single evaluations swing with the clients a round happens to draw)."""
    centralized: list[str] = field(default_factory=_copy_of("centralized"))
    """Algorithms also run centralised, as the upper bound beside the table: one client holding the whole
    training set (its original labels, whatever the partition), the same rounds, epochs and options."""
    client_test_fraction: float = RUN_DEFAULTS["client_test_fraction"]
    """> 0: each client keeps this share of its data out of training as its own test set, and every
    evaluation also ranks each client's held-out rows with the model that client would use (metrics
    ``client-P@k``, example-weighted over the clients; see :meth:`fedkernels.fl.Server.evaluate_clients`)."""
    client_size: int = RUN_DEFAULTS["client_size"]
    """Partition ``primary_label``: samples grouped by their primary label, cut into clients of this many."""
    retrieval: bool = RUN_DEFAULTS["retrieval"]
    """Also evaluate retrieval MAP@R and MAP@10 (``rMAP@10``, the fixed cutoff) of the strategy's
    representations (``Strategy.embed``) on the test set."""
    device: str = RUN_DEFAULTS["device"]
    """Where training, the server's state and evaluation run: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``
    (:mod:`fedkernels.fl.device`)."""
    autocast: str = RUN_DEFAULTS["autocast"]
    """Mixed precision of local training's forward pass: ``"off"`` or ``"bf16"`` (state and aggregation stay
    float32)."""
    secagg: bool = RUN_DEFAULTS["secagg"]
    """Sum the clients' updates with SecAgg+ secure aggregation (docs/api/privacy.md): the server sees only
    sums."""
    secagg_dropouts: int | None = RUN_DEFAULTS["secagg_dropouts"]
    """SecAgg+: an explicit k - threshold (unset: the smallest safe threshold for the threat model), checked."""
    secagg_bits: int = RUN_DEFAULTS["secagg_bits"]
    """SecAgg+: the ring is Z_2^bits."""
    secagg_bound: float = RUN_DEFAULTS["secagg_bound"]
    """SecAgg+ without DP: each contributed value is clamped to ``[-bound, bound]``."""
    secagg_degree: int | None = RUN_DEFAULTS["secagg_degree"]
    """SecAgg+: an explicit neighbour count k (unset: the smallest safe one for the threat model), checked."""
    secagg_corrupt_fraction: float = RUN_DEFAULTS["secagg_corrupt_fraction"]
    """SecAgg+ threat model: the share of a round's clients that may collude with the server."""
    secagg_dropout_fraction: float = RUN_DEFAULTS["secagg_dropout_fraction"]
    """SecAgg+ threat model: the share of a round's clients that may drop out with the sum still recovered."""
    secagg_weight_cap: float = RUN_DEFAULTS["secagg_weight_cap"]
    """SecAgg+ without DP: a client weighs itself by ``min(examples, cap) / cap``, masked."""
    l1diff_segments: int = RUN_DEFAULTS["l1diff_segments"]
    """L1Diff in private rounds: every K-th round dense, the K - 1 between one value per public segment
    (0: every round dense)."""
    dp_clip: float | None = RUN_DEFAULTS["dp_clip"]
    """Client-level DP: L2 clip of each client's update (needs ``dp_noise`` or ``target_epsilon``)."""
    dp_noise: float | None = RUN_DEFAULTS["dp_noise"]
    """Client-level DP: noise multiplier sigma (noise std = sigma * clip)."""
    target_epsilon: float | None = RUN_DEFAULTS["target_epsilon"]
    """Client-level DP: pick sigma so the run ends at this epsilon (at ``dp_delta``)."""
    dp_delta: float = RUN_DEFAULTS["dp_delta"]
    """DP delta of the reported epsilon."""
    dp_mechanism: str = RUN_DEFAULTS["dp_mechanism"]
    """Client-level DP: ``"poisson"`` (DP-FedAvg: a secret Poisson sample each round) or ``"tree"`` (DP-FTRL:
    public participation, each client once an epoch, no sampling assumed)."""
    dp_seeded: bool = RUN_DEFAULTS["dp_seeded"]
    """DP noise, the DP sample and DP-SGD's batches from the run seed: a reproducible simulation, not
    private."""
    dp_sample_clip: float | None = RUN_DEFAULTS["dp_sample_clip"]
    """Sample-level DP-SGD in local training: per-example L2 clip (unset: no DP-SGD)."""
    dp_sample_noise: float = RUN_DEFAULTS["dp_sample_noise"]
    """Sample-level DP-SGD: noise multiplier."""

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
        if not 0 < self.sample_fraction <= 1:
            raise ValueError(f"sample_fraction must lie in (0, 1], got {self.sample_fraction!r}")
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
        for name in self.centralized:  # an unknown name fails here
            built[name] = build_strategy(strategy_class(name), **self.options_for(name))
        seen |= set(built)
        for name in self.algorithm_options:
            if name not in seen:
                raise ValueError(
                    f"algorithm_options has options for {name}, which is not among the algorithms "
                    f"{self.algorithms} (add it to --algorithms or drop its options)"
                )
        for name in self.algorithms:  # unknown names and option keys fail here, before any data is loaded
            cls = strategy_class(name)  # the one lookup of the name's class: a run below uses the object built
            check_option_types(cls, self.options_for(name))
            built[name] = build_strategy(cls, **self.options_for(name))
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


def check_option_types(cls: type[Strategy], options: dict[str, Any]) -> None:
    """Each option of strategy class ``cls`` against its constructor default's type: an int option
    takes an int, a float option a finite number, a sequence of ints (layer widths such as ``hidden``)
    a list of ints >= 1, a bool option true or false.

    Raises:
        ValueError: naming ``ALG.option`` and what it must be.
    """
    import inspect

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
