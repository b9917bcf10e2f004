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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..metrics import ranking_metrics
from ..sparse_rows import slice_rows
from . import evaluation as ev
from . import payload as pl
from .batched import batched_client_updates, has_local_problem
from .checkpoint import clean_stale_temps, load_checkpoint, save_checkpoint
from .client import ClientEndpoint, LocalClient, call_with_deadline
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
from .strategy import State, Strategy
from .types import ClientData, ClientResult, RoundRecord, TrainConfig

ClientWrapper = Callable[[int, ClientEndpoint], ClientEndpoint]


@dataclass
class RunConfig:
    """How a federated run goes: rounds, clients per round, local training, seed, evaluation."""

    rounds: int = 10
    clients_per_round: int = 4
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    eval_every: int = 1
    eval_k: tuple[int, ...] = (1, 3, 5)
    client_timeout: float | None = None  # seconds per client call; None waits forever
    checkpoint: str | None = None  # file written after every round of run(), resumed from if present
    max_upload_bytes: int | None = None  # tighter bound than the strategy's spec on any client's bytes
    # train a round's honest in-process clients in one batched pass where the strategy allows it
    # (fedkernels.fl.batched; equal to the sequential loop up to float rounding); False: one by one
    batch_clients: bool = True
    # aggregation weight of a client: "samples" (its example count, FedAvg's n_k / n) or "uniform"
    # (1 for every client holding data: the plain 1/S mean over the S clients of a round)
    client_weighting: str = "samples"


class Server:
    """Holds the global state and runs rounds of a :class:`Strategy` over in-process clients.

    Args:
        strategy: the algorithm.
        clients: each client's local data.
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
        clients: list[ClientData],
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
        self.strategy = strategy
        self.clients = clients
        self.config = config
        self.state: State = strategy.init_state(num_features, num_classes, derive_seed(config.seed, "init"))
        self.setup_failed: dict[int, str] = {}  # clients whose setup report was left out
        self.setup_bytes_up = 0  # the setup reports' bytes (clients to server), before round 0
        if has_setup_exchange(strategy):  # the same exchange as over Flower, through real bytes
            reports: dict[int, Answer] = {c: _encoded(strategy.setup_report(d)) for c, d in enumerate(clients)}
            seed = derive_seed(config.seed, "setup")
            self.setup_failed, self.setup_bytes_up, self.state = setup_exchange(
                strategy, self.state, reports, seed, config.max_upload_bytes
            )
        self.state = with_entries(self.state, strategy.setup(clients, derive_seed(config.seed, "setup")))
        self.history: list[RoundRecord] = []
        self.round = 0
        self.local_clients = [LocalClient(strategy, d, config.train) for d in clients]  # the honest clients
        self.endpoints: list[ClientEndpoint] = list(self.local_clients)
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
    def num_examples(self) -> dict[int, int]:
        """Each client's aggregation weight: its example count, or with ``client_weighting="uniform"``
        1 for every client holding data (0 for an empty one, which has nothing to average)."""
        if self.config.client_weighting == "uniform":
            return {c: int(len(d) > 0) for c, d in enumerate(self.clients)}
        return {c: len(d) for c, d in enumerate(self.clients)}

    def run_round(self) -> RoundRecord:
        """Select, train, check and aggregate one round (:class:`fedkernels.fl.round.Round`). A
        client that crashes, times out, sends nothing or has its upload rejected is recorded in
        ``failed`` with the reason and left out; the state changes only at the end, and not at all
        if no client succeeded."""
        rnd = self.new_round(self.round)
        self.state, rec = rnd.finish(self.exchange(rnd), self.num_examples)
        self.history.append(rec)
        self.round += 1
        return rec

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the state, round counter, history and run identity to ``path`` atomically."""
        meta = {"round": self.round, "history": [record_to_json(h) for h in self.history], **self._identity()}
        save_checkpoint(path, self.state, meta)

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
        self.state = state
        self.round = int(meta["round"])
        self.history = [record_from_json(h) for h in meta["history"]]

    def _identity(self) -> dict:
        return run_identity(self.strategy, self.config, len(self.clients))

    def evaluate(
        self,
        test: ClientData,
        ks: tuple[int, ...] | None = None,
        batch: int = 4096,
        inv_propensity: torch.Tensor | None = None,
        frequent: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Ranking metrics of the global model on ``test`` (PSP@k with ``inv_propensity`` float ``[p]``,
        frequent/infrequent P@k with ``frequent`` bool ``[p]``: see :func:`fedkernels.metrics.ranking_metrics`)."""
        ks = ks or self.config.eval_k
        kmax = min(max(ks), test.num_classes)
        preds = [
            self.strategy.predict_topk(self.state, slice_rows(test.x, i, i + batch), kmax)
            for i in range(0, len(test), batch)
        ]
        topk = torch.cat(preds) if preds else torch.empty(0, kmax, dtype=torch.int64)
        return ranking_metrics(
            topk, test.indptr, test.indices, tuple(k for k in ks if k <= kmax), inv_propensity, frequent
        )

    def evaluate_federated(
        self, held_out: list[ClientData], ks: tuple[int, ...] | None = None
    ) -> tuple[dict[str, float], dict[int, str]]:
        """Federated evaluation (:mod:`fedkernels.fl.evaluation`): every client ranks its own
        held-out set ``held_out[c]`` under the global model, through real serialisation; the
        example-weighted P@k/nDCG@k and the clients whose report failed."""
        if len(held_out) != len(self.clients):
            raise ValueError(f"held_out must hold one set per client ({len(self.clients)}), got {len(held_out)}")
        ks = ev.evaluation_ks(ks or self.config.eval_k, held_out[0].num_classes)
        down = ev.evaluation_download(self.state)
        reports: dict[int, Answer] = {}
        for c, data in enumerate(held_out):
            try:
                reports[c] = ev.client_evaluation(self.strategy, down, data, ks)
            except Exception as e:  # this client's failure only
                reports[c] = e
        metrics, failed, _ = ev.aggregate_evaluation(reports, ks)
        return metrics, failed

    def evaluate_clients(self, held_out: list[ClientData], ks: tuple[int, ...] | None = None) -> dict[str, float]:
        """Per-client evaluation in this process: client c ranks its own ``held_out[c]`` with the model it
        would use now: its personalised model (a strategy's ``predict_topk_client``), the tensors it kept
        merged with what the server would send it (stateful clients: ``client_view``), else the global
        model. Returns P@k and nDCG@k as example-weighted means over the clients (empty when no client
        holds a test row)."""
        if len(held_out) != len(self.clients):
            raise ValueError(f"held_out must hold one set per client ({len(self.clients)}), got {len(held_out)}")
        ks = ev.evaluation_ks(ks or self.config.eval_k, held_out[0].num_classes)
        names = ev.metric_names(ks)
        sums, total = [0.0] * len(names), 0
        personal = getattr(self.strategy, "predict_topk_client", None)
        for c, data in enumerate(held_out):
            if not len(data) or not ks:
                continue
            if self.strategy.stateful_clients:
                download = self.strategy.client_payload(self.state, c, None, self.round, 0)
                view = self.strategy.client_view(download, self.local_clients[c].memory)
                topk = self.strategy.predict_topk(view, data.x, max(ks))
            elif personal is not None:
                topk = personal(self.state, c, data.x, max(ks))
            else:
                topk = self.strategy.predict_topk(self.state, data.x, max(ks))
            got = ranking_metrics(topk, data.indptr, data.indices, ks)
            total += len(data)
            sums = [s + len(data) * got[n] for s, n in zip(sums, names, strict=True)]
        return {n: v / total for n, v in zip(names, sums, strict=True)} if total else {}

    def run(
        self,
        test: ClientData | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        held_out: list[ClientData] | None = None,
    ) -> list[RoundRecord]:
        """Run the remaining rounds of the config; every ``eval_every`` rounds evaluate on ``test``
        (centralised) and, with ``held_out`` (one set per client), federated (metrics prefixed
        ``fed-``)."""
        while self.round < self.config.rounds:
            rec = self.run_round()
            if test is not None and (rec.round + 1) % self.config.eval_every == 0:
                rec.metrics = self.evaluate(test)
            if held_out is not None and (rec.round + 1) % self.config.eval_every == 0:
                fed, _ = self.evaluate_federated(held_out)
                rec.metrics.update({f"fed-{k}": v for k, v in fed.items()})
            if self.config.checkpoint is not None:
                self.save_checkpoint(self.config.checkpoint)
            if on_round is not None:
                on_round(rec)
        return self.history


def run_identity(strategy: Strategy, config: RunConfig, num_clients: int) -> dict:
    """What a checkpoint must match to be resumed by a run (as it reads back from JSON)."""
    ident = {
        "strategy": strategy.name,
        "seed": config.seed,
        "num_clients": num_clients,
        "clients_per_round": config.clients_per_round,
        "train": dataclasses.asdict(config.train),
        "client_weighting": config.client_weighting,
        "strategy_options": strategy.options(),
    }
    return json.loads(json.dumps(ident))


def check_identity(meta: dict, mine: dict, path: str | Path) -> None:
    """Raise ``ValueError`` naming the first field (``train.lr``, ``strategy_options.loss``, ...)
    where the checkpoint's run identity ``meta`` differs from this run's ``mine``."""
    for key, want in mine.items():
        have = meta.get(key)
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
    return dataclasses.asdict(rec)


def record_from_json(d: dict) -> RoundRecord:
    d = dict(d)
    d["failed"] = [(int(c), str(why)) for c, why in d["failed"]]
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

    def __init__(self, endpoints: list[ClientEndpoint], timeout: float | None, batch: bool = False) -> None:
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
                return {c: Carried(u, pl.encoded_size(u)) for c, u in fast.items()}
        raw = {c: pl.encode(d.payload) if isinstance(d, Carried) else d for c, d in downloads.items()}
        out: dict[int, Upload] = {}
        for c, down in raw.items():
            out[c] = self._call(functools.partial(self.endpoints[c].update, down, round, seeds[c]))
        return out

    def batchable(self, clients: list[int]) -> bool:
        """Whether a round of ``clients`` may take the batched pass: batching on, no deadline, two or
        more clients, all honest :class:`~fedkernels.fl.client.LocalClient` objects of one strategy
        (with a local problem) and one training config."""
        if not self.batch or self.timeout is not None or len(clients) < 2:
            return False
        ends = [self.endpoints[c] for c in clients]
        if any(type(e) is not LocalClient for e in ends):
            return False
        local = [e for e in ends if isinstance(e, LocalClient)]  # all of them (narrows the type)
        first = local[0]
        return has_local_problem(first.strategy) and all(
            e.strategy is first.strategy and e.train == first.train for e in local
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
        return batched_client_updates(first.strategy, data, first.train, downloads, round, seeds)
