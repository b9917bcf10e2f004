"""The embedded federated loop: all clients in one process, every payload really serialised.

Fault tolerant: a client that crashes, misses its deadline, sends nothing or sends a payload that
fails its spec is recorded in ``RoundRecord.failed`` and left out; the state changes only when a
round's checked uploads are aggregated. With ``RunConfig.checkpoint`` the run is checkpointed
atomically after every round and resumes from there, bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .._validate import as_csr
from ..data.client_store import ClientStore
from ..metrics import filter_predictions, ranking_metrics
from ..sparse_rows import slice_rows
from . import evaluation as ev
from . import payload as pl
from .batched import batched_client_updates, has_local_problem
from .checkpoint import HistoryLog, clean_stale_temps, load_checkpoint, save_checkpoint
from .client import ROUND_TAG, ClientEndpoint, LocalClient, call_with_deadline
from .data_identity import data_fingerprint
from .device import resolve_device, to_device
from .eval_batches import eval_batches
from .privacy_settings import check_dp_sgd, check_strategy_dp
from .round import (  # noqa: F401  (re-exported: the names the loop has always had)
    Answer,
    Carried,
    ClientSentNothing,
    Round,
    Upload,
    aggregate_round,
    bounded,
    client_seed,
    failure_reason,
    has_setup_exchange,
    select_clients,
    setup_exchange,
    with_entries,
)
from .seeding import derive_seed
from .store_clients import Endpoints, ExampleCounts, StoreClients, example_counts
from .strategy import State, Strategy
from .types import ClientData, ClientResult, RoundRecord, TrainConfig

ClientWrapper = Callable[[int, ClientEndpoint], ClientEndpoint]


@dataclass
class RunConfig:
    """How a federated run goes: rounds, clients per round, local training, seed, evaluation."""

    rounds: int = 10
    """Federated rounds :meth:`Server.run` runs."""
    clients_per_round: int = 4
    """Clients sampled per round (all of them when there are fewer)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """The clients' local training settings."""
    seed: int = 0
    """The run's seed: client sampling and every client's training derive from it."""
    eval_every: int = 1
    """Evaluate every this many rounds."""
    eval_k: tuple[int, ...] = (1, 3, 5)
    """The k of the ranking metrics."""
    client_timeout: float | None = None
    """Seconds per client call; None waits forever."""
    checkpoint: str | None = None
    """File written after every round of :meth:`Server.run`, resumed from if present."""
    max_upload_bytes: int | None = None
    """A tighter bound than the strategy's spec on any client's upload bytes."""
    batch_clients: bool = False
    """True: train a round's honest in-process clients in one batched pass where the strategy allows it
    (:mod:`fedkernels.fl.batched`: FedAvg, FedAwS/FedALC, partial exchange; bench/fl/fl_batched.py measures
    it). It equals the sequential loop only up to float rounding, so it is opt-in: the default one-by-one
    loop is what Flower runs and what the committed result rows used. The pass trains on ``device`` under
    ``train.autocast``; with DP-SGD (``train.dp_sample_clip``) it runs off the host only (on the CPU the
    sequential loop's per-example backward passes cost less)."""
    client_weighting: str = "samples"
    """Aggregation weight of a client: ``"samples"`` (its example count, FedAvg's n_k / n) or ``"uniform"``
    (1 for every client holding data: the plain 1/S mean over the S clients of a round)."""
    device: str = "cpu"
    """Where the state, local training and evaluation run: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``
    (:mod:`fedkernels.fl.device`). Not part of a checkpoint's run identity: a run checkpointed on one
    device resumes on another."""
    eval_clients: int | None = None
    """Clients per federated evaluation (a seeded sample); None: all."""
    data_id: str | None = None
    """Names the clients' data in a checkpoint's run identity; None: the in-process server hashes the
    clients' data (``fl.data_identity``), a Flower server (which never holds it) records none."""
    sample_delta: float = 1e-5
    """The delta of DP-SGD's sample-level epsilon (``train.dp_sample_clip``; client-level DP has its
    DPConfig's)."""


class Server:
    """Holds the global state and runs rounds of a :class:`Strategy` over in-process clients.

    Args:
        strategy: the algorithm.
        clients: each client's local data: a list, or a
            :class:`~fedkernels.data.client_store.ClientStore`, whose clients are read when a round (or
            an evaluation) asks for them and of which at most ``max(store.max_resident,
            config.clients_per_round)`` are kept materialised (:mod:`fedkernels.fl.store_clients`).
        num_features: the model's input width.
        num_classes: the number of labels.
        config: the run's settings. If ``config.checkpoint`` names an existing file, the run
            resumes from it (its seed, strategy and client counts must match).
        client_wrapper: ``(client_id, endpoint) -> endpoint``, e.g. a
            :class:`fedkernels.fl.faults.FaultInjector` or a test's malicious client.
    """

    def __init__(
        self,
        strategy: Strategy,
        clients: Sequence[ClientData],
        num_features: int,
        num_classes: int,
        config: RunConfig,
        client_wrapper: ClientWrapper | None = None,
    ) -> None:
        if not clients:
            raise ValueError("clients must not be empty")
        if not 1 <= config.clients_per_round <= len(clients):
            raise ValueError(f"clients_per_round must be in [1, {len(clients)}], got {config.clients_per_round}")
        if config.max_upload_bytes is not None and config.max_upload_bytes < 8:
            raise ValueError(f"max_upload_bytes must be >= 8 or None, got {config.max_upload_bytes}")
        if config.client_timeout is not None and not config.client_timeout > 0:
            raise ValueError(f"client_timeout must be positive or None, got {config.client_timeout}")
        if config.checkpoint is not None and strategy.stateful_clients:
            raise ValueError(
                f"checkpoint: strategy {strategy.name} has stateful clients, whose kept tensors a checkpoint "
                "does not hold, so a resumed run would differ; run it without a checkpoint"
            )
        if config.client_weighting not in ("samples", "uniform"):
            raise ValueError(f"client_weighting must be 'samples' or 'uniform', got {config.client_weighting!r}")
        check_dp_sgd(config.train.dp_sample_clip, config.train.dp_sample_noise, "train.{}".format)
        check_strategy_dp(strategy, False, config.train.dp_sample_clip is not None)
        self.device = resolve_device(config.device)
        if config.eval_clients is not None and config.eval_clients < 1:
            raise ValueError(f"eval_clients must be >= 1 or None, got {config.eval_clients}")
        self.strategy = strategy
        self.clients = clients
        self.config = config
        self._counts = example_counts(clients)  # a store's from its index: no client read
        # built on the host (seeded host generators: the same initial state on every device), then moved
        init = strategy.init_state(num_features, num_classes, derive_seed(config.seed, "init"))
        self.state: State = to_device(init, self.device)
        self.setup_failed: dict[int, str] = {}  # clients whose setup report was left out
        self.setup_bytes_up = 0  # the setup reports' bytes (clients to server), before round 0
        if has_setup_exchange(strategy):  # the same exchange as over Flower, through real bytes
            reports: dict[int, Answer] = {c: _encoded(strategy.setup_report(d)) for c, d in enumerate(clients)}
            seed = derive_seed(config.seed, "setup")
            self.setup_failed, self.setup_bytes_up, self.state = setup_exchange(
                strategy, self.state, reports, seed, config.max_upload_bytes
            )
        setup = to_device(strategy.setup(clients, derive_seed(config.seed, "setup")), self.device)
        self.state = with_entries(self.state, setup)
        self.history: list[RoundRecord] = []
        self.round = 0
        self.accountant = self.new_accountant()  # None: the run has no DP to account
        self._data_id: str | None = None
        self._log: HistoryLog | None = None  # the saved records' JSON, kept between saves
        self._log_json: list[dict] = []
        # the honest clients: over a store made on demand, a bounded number kept
        self.local_clients: Sequence[LocalClient]
        self.endpoints: Sequence[ClientEndpoint]
        if isinstance(clients, ClientStore):
            resident = max(clients.max_resident, config.clients_per_round)
            self.local_clients = StoreClients(strategy, clients, config.train, self.device, resident)
            self.endpoints = self.local_clients
            if client_wrapper is not None:
                self.endpoints = Endpoints(self.local_clients, client_wrapper)
        else:
            self.local_clients = [LocalClient(strategy, d, config.train, self.device) for d in clients]
            self.endpoints = list(self.local_clients)
            if client_wrapper is not None:
                self.endpoints = [client_wrapper(i, e) for i, e in enumerate(self.endpoints)]
        if config.checkpoint is not None:
            clean_stale_temps(config.checkpoint)  # an earlier save killed before its rename
            if Path(config.checkpoint).exists():
                self.load_checkpoint(config.checkpoint)

    def select_clients(self, round: int) -> list[int]:
        """The clients of ``round``: a seeded sample without replacement, in ascending id order."""
        return select_clients(self.config.seed, round, len(self.clients), self.config.clients_per_round)

    def new_round(self, round: int, chosen: list[int] | None = None) -> Round:
        """The round protocol for ``round`` over ``chosen`` (default: :meth:`select_clients`)."""
        chosen = self.select_clients(round) if chosen is None else chosen
        return Round(self.strategy, self.state, round, chosen, self.config.seed, self.config.max_upload_bytes)

    def exchange(self, rnd: Round) -> dict[int, Upload]:
        """Carry ``rnd``'s requests and downloads to the in-process clients; their uploads."""
        transport = InProcessTransport(self.endpoints, self.config.client_timeout, self.config.batch_clients)
        asked = transport.requests(rnd.round, rnd.seeds())
        if transport.batchable(list(rnd.seeds())):  # the batched pass takes the payloads themselves
            return dict(transport.updates(rnd.round, dict(rnd.carried_downloads(asked)), rnd.seeds()))
        return dict(transport.updates(rnd.round, dict(rnd.downloads(asked)), rnd.seeds()))

    def run_client(self, client_id: int, round: int) -> tuple[ClientResult, int]:
        """One client's round trip through real serialisation and the round protocol's checks (no
        aggregation). Returns its checked result and the bytes sent down.

        Raises:
            PayloadError: the request or upload fails its spec or the strategy's check.
            ClientTimeout: the client missed ``config.client_timeout``.
            ClientSentNothing: the client answered with no upload.
            Exception: whatever the client raised (a crash).
        """
        rnd = self.new_round(round, [client_id])
        results = rnd.collect(self.exchange(rnd), self.num_examples)
        if client_id in rnd.errors:
            raise rnd.errors[client_id]
        return results[0], rnd.bytes_down(client_id)

    @property
    def num_examples(self) -> Mapping[int, int]:
        """Each client's aggregation weight: its example count, or with ``client_weighting="uniform"``
        1 for every client holding data (0 for an empty one, which has nothing to average)."""
        return ExampleCounts(self._counts, self.config.client_weighting == "uniform")

    def run_round(self) -> RoundRecord:
        """Select, train, check and aggregate one round (:class:`fedkernels.fl.round.Round`). A
        client that crashes, times out, sends nothing or has its upload rejected is recorded in
        ``failed`` with the reason and left out; the state changes only at the end, and not at all
        if no client succeeded."""
        rnd = self.new_round(self.round)
        self.state, rec = rnd.finish(self.exchange(rnd), self.num_examples)
        self.record(rec)
        return rec

    def record(self, rec: RoundRecord) -> None:
        """Append a finished round to the history, with its privacy accounted
        (:class:`~fedkernels.fl.privacy.accounting.RunAccountant`: epsilon written into ``rec.privacy``)."""
        if self.accountant is not None:
            self.accountant.add(rec)
        self.history.append(rec)
        self.round += 1

    def new_accountant(self):  # -> RunAccountant | None (the class needs the extra fedkernels[privacy])
        """The run's DP accountant (None without DP): here DP-SGD's sample-level epsilon."""
        if self.config.train.dp_sample_clip is None:
            return None
        try:
            from .privacy.accounting import make_accountant
        except ModuleNotFoundError as e:  # the accountant is dp-accounting's: no epsilon without it
            raise RuntimeError(
                f"DP-SGD (dp_sample_clip) needs the extra fedkernels[privacy] for its accountant ({e}); "
                "pip install 'fedkernels[privacy]'"
            ) from e

        return make_accountant(self.config.train, None, self.config.sample_delta, lambda c: int(self._counts[c]))

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the state, round counter, history and run identity to ``path`` atomically. Records
        already saved are not encoded again (:class:`~fedkernels.fl.checkpoint.HistoryLog`)."""
        if self._log is None or self._log.path != str(path):
            self._log, self._log_json = HistoryLog(len(self.clients), str(path)), []
        done = self._log_json
        del done[max(0, len(self.history) - 1) :]  # the last record may have changed since
        done += [record_to_json(h) for h in self.history[len(done) :]]
        meta = {"round": self.round, "history": done, **self._identity()}
        save_checkpoint(path, self.state, meta, self._log)

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from a checkpoint written by :meth:`save_checkpoint` for the same run.

        Raises:
            PayloadError: the file is not a checkpoint of this state's shapes, is damaged (checksum)
                or has malformed metadata (the message names the path and the field).
            ValueError: it was written by a run with another seed, strategy, strategy options,
                TrainConfig or clients (the message names what differs).
        """
        state, meta = load_checkpoint(path, self.state)
        check_identity(meta, self._identity(), path)
        self.state = to_device(state, self.device)  # checkpoints hold host tensors, whatever device wrote them
        self.round = int(meta["round"])
        self.history = [record_from_json(h) for h in meta["history"]]
        self._log = None  # the next save encodes this history afresh
        self.accountant = self.new_accountant()  # composes the checkpoint's rounds, whatever this run's flags
        if self.accountant is not None:
            for rec in self.history:
                self.accountant.add(rec)

    def _identity(self) -> dict:
        if self._data_id is None:  # computed once, when a checkpoint is first written or read
            self._data_id = self.config.data_id or data_fingerprint(self.clients)
        return run_identity(self.strategy, self.config, len(self.clients), self._data_id)

    def evaluate(
        self,
        test: ClientData,
        ks: tuple[int, ...] | None = None,
        batch: int = 4096,
        inv_propensity: torch.Tensor | None = None,
        frequent: torch.Tensor | None = None,
        test_filter: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dict[str, float]:
        """Ranking metrics of the global model on ``test`` (PSP@k and PSnDCG@k with ``inv_propensity``
        float ``[p]``, frequent/infrequent P@k with ``frequent`` bool ``[p]``: see
        :func:`fedkernels.metrics.ranking_metrics`). ``test_filter`` (CSR ``indptr [N + 1], indices``
        over the test rows, an LF-* dataset's filter file) drops those (sample, label) pairs from the
        predictions before scoring. Every strategy predicts through a fused top-k, so memory stays
        O(batch * (hidden + k)) whatever the number of classes; a row whose filter lists f labels
        predicts k + f classes, in a batch of fewer rows (:func:`~fedkernels.fl.eval_batches.eval_batches`:
        at most ``EVAL_ELEMENTS`` predictions, or one row), so a long filter row costs its own rows only.
        Each batch of ``test`` is ranked on the run's device; the filter and the metrics run on the host."""
        ks = ks or self.config.eval_k
        kmax = min(max(ks), test.num_classes)
        filtered = None
        if test_filter is not None:
            fp, fi = as_csr(*test_filter, num_rows=len(test))
            filtered = fp.diff()  # a row filtering f labels predicts kmax + f (eval_batches bounds the memory)
        preds = []
        for i, j, width in eval_batches(len(test), batch, kmax, test.num_classes, filtered):
            top = self.strategy.predict_topk(self.state, slice_rows(test.x, i, j).to(self.device), width).cpu()
            if filtered is not None:
                rows = fp[i : j + 1]
                top = filter_predictions(top, rows - rows[0], fi[int(rows[0]) : int(rows[-1])], kmax)
            preds.append(top)
        topk = torch.cat(preds) if preds else torch.empty(0, kmax, dtype=torch.int64, device="cpu")
        return ranking_metrics(
            topk, test.indptr, test.indices, tuple(k for k in ks if k <= kmax), inv_propensity, frequent
        )

    def evaluate_federated(
        self,
        held_out: list[ClientData],
        ks: tuple[int, ...] | None = None,
        inv_propensity: torch.Tensor | None = None,
        round: int | None = None,
    ) -> tuple[dict[str, float], dict[int, str]]:
        """Federated evaluation (:mod:`fedkernels.fl.evaluation`): clients rank their own held-out
        sets ``held_out[c]`` under the global model, through real serialisation; the
        example-weighted P@k/nDCG@k/R@k (and PSP@k/PSnDCG@k when ``inv_propensity`` float ``[p]`` is
        given: it is sent with the model) and the clients whose report failed. After ``round``
        (0-based) with ``config.eval_clients`` set, only that round's seeded sample of clients
        evaluates (:func:`fedkernels.fl.evaluation.evaluation_clients`); otherwise every client does."""
        if len(held_out) != len(self.clients):
            raise ValueError(f"held_out must hold one set per client ({len(self.clients)}), got {len(held_out)}")
        ks = ev.evaluation_ks(ks or self.config.eval_k, held_out[0].num_classes)
        down = ev.evaluation_download(self.state, inv_propensity)
        per_round = self.config.eval_clients if round is not None else None
        reports: dict[int, Answer] = {}
        for c in ev.evaluation_clients(self.config.seed, round or 0, len(self.clients), per_round):
            try:
                reports[c] = ev.client_evaluation(self.strategy, down, held_out[c], ks, self.device)
            except Exception as e:  # this client's failure only
                reports[c] = e
        metrics, failed, _ = ev.aggregate_evaluation(reports, ks, inv_propensity is not None)
        return metrics, failed

    def client_model(self, client: int) -> Callable[[torch.Tensor, int], torch.Tensor | None]:
        """The ranking of the model client ``client`` would use now, built once: ``rank(x [N, F], k)`` gives
        its top ``k`` classes (int64 ``[N, k]``), or ``None`` where that model is the global one (shared by
        every client without a model of its own). Stateful clients rank with the tensors they kept merged
        with what the server would send them (``client_view``); others with their personalised model (a
        strategy's ``predict_topk_client``), when they have one."""
        strategy = self.strategy
        if strategy.stateful_clients:
            download = strategy.client_payload(self.state, client, None, self.round, 0)
            memory = self.local_clients[client].memory
            view = strategy.client_view(download, None if memory is None else to_device(memory, self.device))
            return lambda x, k: strategy.predict_topk(view, x, k)
        state = self.state
        return lambda x, k: strategy.predict_topk_client(state, client, x, k)

    def client_topk(self, client: int, x: torch.Tensor, k: int) -> torch.Tensor:
        """The top ``k`` classes (int64 ``[N, k]``) of rows ``x`` (on the run's device) under the model client
        ``client`` would use now (:meth:`client_model`), else the global model."""
        personal = self.client_model(client)(x, k)
        return personal if personal is not None else self.strategy.predict_topk(self.state, x, k)

    def evaluate_clients(self, held_out: list[ClientData], ks: tuple[int, ...] | None = None) -> dict[str, float]:
        """Per-client evaluation in this process: client c ranks its own ``held_out[c]`` with the model it
        would use now (:meth:`client_topk`). Returns P@k and nDCG@k as example-weighted means over the
        clients (empty when no client holds a test row)."""
        if len(held_out) != len(self.clients):
            raise ValueError(f"held_out must hold one set per client ({len(self.clients)}), got {len(held_out)}")
        ks = ev.evaluation_ks(ks or self.config.eval_k, held_out[0].num_classes)
        names = ev.metric_names(ks)
        sums, total = [0.0] * len(names), 0
        for c, data in enumerate(held_out):
            if not len(data) or not ks:
                continue
            data = data.to(self.device)
            got = ranking_metrics(self.client_topk(c, data.x, max(ks)), data.indptr, data.indices, ks)
            total += len(data)
            sums = [s + len(data) * got[n] for s, n in zip(sums, names, strict=True)]
        return {n: v / total for n, v in zip(names, sums, strict=True)} if total else {}

    def evaluate_clients_on(
        self, test: ClientData, ks: tuple[int, ...] | None = None, batch: int = 4096
    ) -> dict[str, float]:
        """Every client's model on one shared ``test`` set (the partial-exchange paper's evaluation: "every
        client is evaluated on the test set"): client c ranks all of ``test`` with the model it would use
        now (:meth:`client_model`, built once per client), in batches of ``batch`` rows. Returns P@k, nDCG@k
        and R@k as the mean over the clients (each ranks the same rows); empty when ``test`` has no rows. A
        batch that a client ranks with the global model is ranked once for all such clients."""
        ks = ev.evaluation_ks(ks or self.config.eval_k, test.num_classes)
        names = ev.metric_names(ks)
        if not len(test) or not ks or not self.clients:
            return {}
        k, bounds = max(ks), [(i, min(i + batch, len(test))) for i in range(0, len(test), batch)]
        xs = [slice_rows(test.x, i, j) for i, j in bounds]
        glob: dict[int, torch.Tensor] = {}
        sums = [0.0] * len(names)
        for c in range(len(self.clients)):
            parts, rank = [], self.client_model(c)
            for b, rows in enumerate(xs):
                x = rows.to(self.device)
                personal = rank(x, k)
                if personal is None and b not in glob:
                    glob[b] = self.strategy.predict_topk(self.state, x, k)
                parts.append((glob[b] if personal is None else personal).cpu())
            got = ranking_metrics(torch.cat(parts), test.indptr, test.indices, ks)
            sums = [s + got[n] for s, n in zip(sums, names, strict=True)]
        return {n: v / len(self.clients) for n, v in zip(names, sums, strict=True)}

    def run(
        self,
        test: ClientData | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        held_out: list[ClientData] | None = None,
        after_round: Callable[[RoundRecord], None] | None = None,
    ) -> list[RoundRecord]:
        """Run the remaining rounds of the config; every ``eval_every`` rounds evaluate on ``test``
        (centralised) and, with ``held_out`` (one set per client), federated (metrics prefixed
        ``fed-``). Each round's record then goes to ``after_round`` (the caller's own checks and
        evaluation, which may raise to stop the run or fill in the record), is checkpointed with
        ``config.checkpoint``, and goes to ``on_round`` (progress display)."""
        while self.round < self.config.rounds:
            rec = self.run_round()
            if test is not None and (rec.round + 1) % self.config.eval_every == 0:
                rec.metrics = self.evaluate(test)
            if held_out is not None and (rec.round + 1) % self.config.eval_every == 0:
                fed, _ = self.evaluate_federated(held_out, round=rec.round)
                rec.metrics.update({f"fed-{k}": v for k, v in fed.items()})
            if after_round is not None:
                after_round(rec)
            if self.config.checkpoint is not None:
                self.save_checkpoint(self.config.checkpoint)
            if on_round is not None:
                on_round(rec)
        return self.history


def run_identity(strategy: Strategy, config: RunConfig, num_clients: int, data: str | None = None) -> dict:
    """What a checkpoint must match to be resumed by a run (as it reads back from JSON); ``data``
    names the clients' data (default: ``config.data_id``)."""
    ident = {
        "strategy": strategy.name,
        "data": data if data is not None else config.data_id,
        "seed": config.seed,
        "num_clients": num_clients,
        "clients_per_round": config.clients_per_round,
        "train": _train_identity(config.train),
        "client_weighting": config.client_weighting,
        "strategy_options": strategy.options(),
    }
    return json.loads(json.dumps(ident))


def _train_identity(train: TrainConfig) -> dict:
    """The training settings a checkpoint must match. ``dp_sample_seeded`` appears only when set, so a
    checkpoint written before that setting existed still resumes."""
    out = dataclasses.asdict(train)
    if not out["dp_sample_seeded"]:
        del out["dp_sample_seeded"]
    return out


def check_identity(meta: dict, mine: dict, path: str | Path) -> None:
    """Raise ``ValueError`` naming the first field (``train.lr``, ``strategy_options.loss``, ...)
    where the checkpoint's run identity ``meta`` differs from this run's ``mine``."""
    for key, want in mine.items():
        have = meta.get(key)
        if key == "data" and have is None and "data" in meta:
            continue  # written without a data identity (a Flower server never holds the data)
        if key == "data" and have != want:
            raise ValueError(
                f"checkpoint {path} was written for other data (data={have!r:.24}..., this run has "
                f"{want!r:.24}...): another dataset, split, partition or preprocessing"
            )
        if isinstance(want, dict) and isinstance(have, dict):
            for sub in sorted(set(want) | set(have)):
                if have.get(sub) != want.get(sub):
                    raise ValueError(
                        f"checkpoint {path} has {key}.{sub}={have.get(sub)!r}, this run has {want.get(sub)!r}"
                    )
        elif have != want:
            raise ValueError(f"checkpoint {path} has {key}={have!r}, this run has {want!r}")


def _encoded(report: pl.Payload | None) -> bytes | None:
    return None if report is None else pl.encode(report)


def record_to_json(rec: RoundRecord) -> dict:
    """A record as JSON values (``dataclasses.asdict`` without its deep copies, which cost more than the rest)."""
    return {
        "round": rec.round,
        "clients": list(rec.clients),
        "failed": [[c, why] for c, why in rec.failed],
        "bytes_down": rec.bytes_down,
        "bytes_up": rec.bytes_up,
        "metrics": dict(rec.metrics),
        "seconds": rec.seconds,
        "skipped": rec.skipped,
        "privacy": dict(rec.privacy),
        "faults": [[c, why] for c, why in rec.faults],
        "contributed": list(rec.contributed),
    }


def record_from_json(d: dict) -> RoundRecord:
    """A record from :func:`record_to_json`'s form; a record written before ``contributed`` existed
    counts every chosen client as a contributor (the bound DP accounting may assume)."""
    d = dict(d)
    d["failed"] = [(int(c), str(why)) for c, why in d["failed"]]
    d["faults"] = [(int(c), str(why)) for c, why in d.get("faults", [])]
    d.setdefault("contributed", list(d["clients"]))
    return RoundRecord(**d)


class InProcessTransport:
    """The in-process transport: calls each client's endpoint in turn, each call under the deadline.

    With ``batch`` (and no deadline), a round whose chosen clients are all honest
    :class:`~fedkernels.fl.client.LocalClient` objects of one strategy and one training config is
    trained in one batched pass (:func:`fedkernels.fl.batched.batched_client_updates`) when the
    strategy gives a local problem for each. Downloads and uploads then travel as tensors
    (:class:`~fedkernels.fl.round.Carried`), not bytes: each is counted at its exact serialised length
    and every upload passes the same spec and content checks as a decoded one; only the byte framing,
    which an honest in-process client cannot get wrong, is not exercised. Any wrapped endpoint (a fault
    injector, a test's malicious client) keeps the round on the sequential loop and real bytes.

    Args:
        endpoints: client id -> its endpoint.
        timeout: seconds per call (``None`` waits forever).
        batch: allow the batched pass.
    """

    def __init__(self, endpoints: Sequence[ClientEndpoint], timeout: float | None, batch: bool = False) -> None:
        self.endpoints, self.timeout, self.batch = endpoints, timeout, batch

    def _call(self, fn: Callable[[], bytes | None]) -> Answer:
        try:
            return call_with_deadline(fn, self.timeout)
        except Exception as e:  # the client's failure, handed to the round protocol to record
            return e

    def requests(self, round: int, seeds: dict[int, int]) -> dict[int, Answer]:
        """Each client's raw request (``None``: it made none)."""
        out: dict[int, Answer] = {}
        for c, seed in seeds.items():
            out[c] = self._call(functools.partial(self.endpoints[c].request, round, seed))
        return out

    def updates(self, round: int, downloads: dict[int, bytes | Carried], seeds: dict[int, int]) -> dict[int, Upload]:
        """Each client's raw upload in answer to its download (carried downloads: the batched pass's
        carried uploads, or, where it declines, the sequential loop on their bytes)."""
        carried = {c: d.payload for c, d in downloads.items() if isinstance(d, Carried)}
        if carried:
            fast = self._batched(round, carried, seeds)
            if fast is not None:
                tag = {ROUND_TAG: str(round)}  # what LocalClient.update writes into its upload's header
                return {c: Carried(u, pl.encoded_size(u, tag), tag) for c, u in fast.items()}
        raw = {c: pl.encode(d.payload) if isinstance(d, Carried) else d for c, d in downloads.items()}
        out: dict[int, Upload] = {}
        for c, down in raw.items():
            out[c] = self._call(functools.partial(self.endpoints[c].update, down, round, seeds[c]))
        return out

    def batchable(self, clients: list[int]) -> bool:
        """Whether a round of ``clients`` may take the batched pass: batching on, no deadline, two or
        more clients, all honest :class:`~fedkernels.fl.client.LocalClient` objects of one strategy
        (with a local problem), one training config and one device. The pass trains on that device (the
        host or a GPU), under the config's autocast; DP-SGD rounds take it off the host only."""
        if not self.batch or self.timeout is not None or len(clients) < 2:
            return False
        ends = [self.endpoints[c] for c in clients]
        if any(type(e) is not LocalClient for e in ends):
            return False
        local = [e for e in ends if isinstance(e, LocalClient)]  # all of them (narrows the type)
        first = local[0]
        if first.train.dp_sample_clip is not None and first.device.type == "cpu":
            # train_batched takes DP-SGD's steps exactly, but materialising every example's gradient
            # costs more on the CPU than the loop's one backward pass per example (bench/fl/fl_batched.py);
            # on a GPU one vmap over the clients' examples replaces thousands of tiny backward passes
            return False
        return has_local_problem(first.strategy) and all(
            e.strategy is first.strategy and e.train == first.train and e.device == first.device for e in local
        )

    def _batched(
        self, round: int, downloads: dict[int, pl.Payload], seeds: dict[int, int]
    ) -> dict[int, pl.Payload] | None:
        """The batched pass's uploads, or ``None`` where the round must run one client at a time."""
        if not self.batchable(list(downloads)):
            return None
        local = [self.endpoints[c] for c in downloads]
        assert all(isinstance(e, LocalClient) for e in local)  # batchable checked it
        first = local[0]
        assert isinstance(first, LocalClient)
        data = {c: e.data for c, e in zip(downloads, local, strict=True) if isinstance(e, LocalClient)}
        return batched_client_updates(first.strategy, data, first.train, downloads, round, seeds, first.device)
