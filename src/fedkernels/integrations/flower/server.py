"""The server side over Flower: :class:`FlowerStrategy`, the Flower transport of the round protocol
(:mod:`fedkernels.fl.round`) that the in-process :class:`fedkernels.fl.Server` drives too.

The selection, seeds, checks, failure reasons, aggregation order and byte counts are the round
protocol's, so a Flower run ends bit-identical to the in-process run with the same seed. What is
Flower's here: which node serves which client (:mod:`.nodes`), payloads as ArrayRecords
(:mod:`.records`), deadlines that account for queueing (:mod:`.exchange`), and resuming a killed
ServerApp from its checkpoint.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from flwr.app import DEFAULT_TTL, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result
from flwr.serverapp.strategy import Strategy as _FlowerStrategy

from ...fl import evaluation as ev
from ...fl import payload as pl
from ...fl.checkpoint import clean_stale_temps, load_checkpoint, save_checkpoint
from ...fl.client import ROUND_TAG
from ...fl.device import resolve_device, to_device
from ...fl.privacy_settings import check_dp_sgd, check_strategy_dp
from ...fl.round import (
    Answer,
    ClientFailed,
    Round,
    bounded,
    has_setup_exchange,
    select_clients,
    setup_exchange,
)
from ...fl.seeding import derive_seed
from ...fl.server import RunConfig, check_identity, record_from_json, record_to_json, run_identity
from ...fl.strategy import State, Strategy
from ...fl.types import RoundRecord
from . import protocol as pr
from .exchange import deadline_ttl, exchange
from .nodes import GONE, NodeRegistry
from .records import ArrayCache, payload_to_record, record_to_bytes

TIMED_OUT = "timed out (no reply)"
MAX_IDENTIFY_TRIES = 3  # a node that does not answer the identify query this often is refused
DEFAULT_STARTUP_GRACE = 30.0
CentralEvaluate = Callable[[int, ArrayRecord], MetricRecord | None]
OnRound = Callable[[RoundRecord], None]


EXAMPLES = "examples."  # + client id: a DP-SGD round's record keeps each contributor's example count


class FlowerStrategy(_FlowerStrategy):
    """A fedkernels strategy served over Flower.

    Args:
        strategy: the fedkernels algorithm. One whose ``setup`` needs client data in the server's
            hands is refused (a Flower server never has it); a setup exchange (``setup_report``,
            e.g. FedALC) runs as Flower messages before round 1.
        num_features, num_classes: the model's input width and label count.
        num_clients: how many clients (nodes with ``partition-id`` 0..num_clients-1) take part.
        config: as for :class:`fedkernels.fl.Server`: rounds, clients per round, local training,
            seed, ``client_timeout`` (seconds one message may take, counted from the last reply
            before it: :mod:`.exchange`), ``max_upload_bytes``, ``eval_every``, ``eval_k``,
            ``eval_clients`` (clients per federated evaluation) and ``checkpoint`` (written
            atomically after each round in the in-process Server's format, and resumed from when
            it exists).
        federated_evaluation: every ``config.eval_every`` rounds, ``config.eval_clients`` sampled
            clients (all when None) evaluate the global model on their own held-out data.
        startup_grace: seconds to wait before round 1 for every client to have a node (round 1
            starts as soon as they all do); later rounds never wait for nodes.
        partition_keys: optional client -> PEM public key of the only node allowed to serve it
            (with SuperNode authentication; see :mod:`.nodes`).
        max_in_flight: the most messages out at once in an exchange (``None``: a round's all);
            on Flower's simulation engine with many virtual nodes, a few per worker (:mod:`.exchange`).

    Attributes:
        state: the global fedkernels State.
        history: one :class:`RoundRecord` per round, as in the in-process Server (``failed``
            reasons include "not connected", "gone (node left)" and "timed out (no reply)").
        nodes: the :class:`~.nodes.NodeRegistry` (client-to-node map, refusals, events).
        setup_failed: clients whose setup report was left out (client -> reason).
        setup_bytes_up: the bytes of the setup reports taken (0 without a setup exchange).
        resumed_from: the round a checkpoint resumed this run at (None: started afresh).
        discovery_seconds: time spent identifying nodes before round 1.
        messages_sent: message type -> how many this run pushed.
    """

    def __init__(
        self,
        strategy: Strategy,
        num_features: int,
        num_classes: int,
        num_clients: int,
        config: RunConfig,
        federated_evaluation: bool = False,
        startup_grace: float = DEFAULT_STARTUP_GRACE,
        partition_keys: dict[int, bytes] | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        if strategy.stateful_clients:
            raise NotImplementedError(
                f"strategy {strategy.name} has stateful clients (they keep tensors between rounds), which the "
                "Flower adapter does not carry; run it in process (or, for PartialExchange, keep_unreceived=False)"
            )
        if strategy.setup_needs_client_data():
            raise NotImplementedError(
                f"strategy {strategy.name} needs client data in setup(), which a Flower server does not have "
                "(give it a setup exchange: setup_report / setup_from_reports)"
            )
        if not 1 <= config.clients_per_round <= num_clients:
            raise ValueError(f"clients_per_round must be in [1, {num_clients}], got {config.clients_per_round}")
        if config.client_timeout is not None and not config.client_timeout > 0:
            raise ValueError(f"client_timeout must be positive or None, got {config.client_timeout}")
        if config.eval_clients is not None and config.eval_clients < 1:
            raise ValueError(f"eval_clients must be >= 1 or None, got {config.eval_clients}")
        if config.client_weighting not in ("samples", "uniform"):
            raise ValueError(f"client_weighting must be 'samples' or 'uniform', got {config.client_weighting!r}")
        check_dp_sgd(config.train.dp_sample_clip, config.train.dp_sample_noise, "train.{}".format)
        check_strategy_dp(strategy, False, config.train.dp_sample_clip is not None)
        if not startup_grace >= 0:
            raise ValueError(f"startup_grace must be >= 0, got {startup_grace}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self.strategy, self.config, self.num_clients = strategy, config, num_clients
        self.federated_evaluation, self.startup_grace = federated_evaluation, startup_grace
        self.dims = (num_features, num_classes)
        self.device = resolve_device(config.device)
        init = strategy.init_state(num_features, num_classes, derive_seed(config.seed, "init"))
        self.state: State = to_device(init, self.device)
        self.history: list[RoundRecord] = []
        self.examples: dict[int, int] = {}  # client -> the example count it last reported
        self.accountant = self.new_accountant()  # None: the run has no DP to account
        self.nodes = NodeRegistry(num_clients, partition_keys)
        self.identity = pr.run_identity(strategy)
        self.digest = pr.identity_digest(self.identity)
        self.timeout = config.client_timeout or 3600.0
        self.setup_failed: dict[int, str] | None = None  # None until the setup exchange ran
        self.setup_bytes_up = 0
        self.resumed_from: int | None = None
        self.discovery_seconds = 0.0
        self.messages_sent: Counter[str] = Counter()  # message type -> how many were pushed
        self._identify_tries: dict[int, int] = {}
        self._grid: Grid | None = None
        self._round: Round | None = None
        self._outbox: dict[int, Message] = {}  # client -> the message of the exchange in progress
        self._eval_sample: list[int] = []
        self._online: set[int] | None = None  # the online nodes, read once per batch of replies
        self._refreshed: int | None = None  # the round the node map was last refreshed for
        self.rounds_planned: int | None = None  # the rounds the last start() runs to (None before any)

    # ---- the run -------------------------------------------------------------------------------
    def summary(self) -> None:
        print(
            f"fedkernels {self.strategy.name} over Flower: {self.num_clients} clients, "
            f"{self.config.clients_per_round} per round, seed {self.config.seed}"
        )

    def arrays(self) -> ArrayRecord:
        """The global state as an ArrayRecord (a copy; :attr:`state` is the source of truth)."""
        return payload_to_record(self.state)

    def initial_arrays(self) -> ArrayRecord:
        """The state before round 1 as an ArrayRecord (Flower's ``start`` takes one)."""
        return self.arrays()

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord | None = None,
        num_rounds: int | None = None,
        timeout: float | None = None,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: CentralEvaluate | None = None,
        on_round: OnRound | None = None,
    ) -> Result:
        """Run (or, from ``config.checkpoint``, resume) the rounds up to ``num_rounds`` (default
        ``config.rounds``). ``initial_arrays``, ``train_config`` and ``evaluate_config`` are
        accepted for Flower's signature and unused (the state is :attr:`state`); ``timeout``
        overrides ``config.client_timeout``; ``evaluate_fn(server_round, arrays)`` is centralised
        evaluation (before round 1 and every ``eval_every`` rounds); ``on_round(record)`` is called
        after each round's checkpoint."""
        rounds = self.config.rounds if num_rounds is None else num_rounds
        self.rounds_planned = rounds
        if timeout is not None:
            self.timeout = timeout
        self._grid = grid
        self.connect(grid)
        if self.setup_failed is None:
            self._setup(grid)
        if self.config.checkpoint is not None and not self.history:
            clean_stale_temps(self.config.checkpoint)
            if Path(self.config.checkpoint).exists():
                self.load_checkpoint(self.config.checkpoint)
        result = Result()
        if evaluate_fn is not None and not self.history:
            got = evaluate_fn(0, self.arrays())
            if got is not None:
                result.evaluate_metrics_serverapp[0] = got
        while len(self.history) < rounds:
            server_round = len(self.history) + 1
            metrics = self.train_round(grid, server_round)
            if metrics is not None:
                result.train_metrics_clientapp[server_round] = metrics
            evaluate = list(self.configure_evaluate(server_round, ArrayRecord(), ConfigRecord(), grid))
            fed = self.aggregate_evaluate(server_round, self._send(grid, evaluate))
            if fed is not None:
                result.evaluate_metrics_clientapp[server_round] = fed
            if evaluate_fn is not None and server_round % self.config.eval_every == 0:
                got = evaluate_fn(server_round, self.arrays())
                if got is not None:
                    result.evaluate_metrics_serverapp[server_round] = got
            if self.config.checkpoint is not None:  # after the round's evaluations: one record, complete
                self.save_checkpoint(self.config.checkpoint)
            if on_round is not None:
                on_round(self.history[-1])
        result.arrays = self.arrays()
        return result

    def connect(self, grid: Grid) -> None:
        """Before round 1: identify the online nodes until every client has one or
        ``startup_grace`` seconds pass (a missing client fails "not connected" until its node comes).
        A node slow to answer now (e.g. the simulation engine's workers still starting) is asked
        again, waiting up to the grace for a first reply, and is not counted against it."""
        t0 = time.monotonic()
        while True:
            left = max(0.0, self.startup_grace - (time.monotonic() - t0))
            self._refresh(grid, len(self.history), startup_wait=max(self.timeout, left))
            if self.nodes.complete() or time.monotonic() - t0 >= self.startup_grace:
                break
            time.sleep(min(0.5, max(0.0, self.startup_grace - (time.monotonic() - t0))))
        self.discovery_seconds = time.monotonic() - t0

    # ---- Flower's Strategy API: one round --------------------------------------------------------
    def train_round(self, grid: Grid, server_round: int) -> MetricRecord | None:
        """One round's training: :meth:`configure_train`, the exchange, :meth:`aggregate_train`
        (a private round, :mod:`.private_server`, runs several exchanges here instead)."""
        train = self.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid)
        return self.aggregate_train(server_round, self._send(grid, train))[1]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Refresh the client-to-node map, select the round's clients, ask the requests (if the
        strategy takes any) and build the train messages (downloads as ArrayRecords, each distinct
        tensor converted once)."""
        r = server_round - 1
        self._grid = grid
        if self._refreshed != r:
            self._refresh(grid, r)
        chosen = select_clients(self.config.seed, r, self.num_clients, self.config.clients_per_round)
        rnd = Round(self.strategy, self.state, r, chosen, self.config.seed, self.config.max_upload_bytes)
        self._round = rnd
        for c in chosen:
            if c not in self.nodes.node_of:
                rnd.fail(c, ClientFailed(self.nodes.failure(c)))
        asked = self._ask_requests(grid, rnd) if rnd.wants_requests() else {}
        seeds, cache = rnd.seeds(), ArrayCache()
        self._outbox = {
            c: self._message(
                c,
                MessageType.TRAIN,
                str(server_round),
                self._header(r, c, seeds[c]),
                payload_to_record(down, cache),
            )
            for c, down in rnd.download_payloads(asked).items()
        }
        return list(self._outbox.values())

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Check and aggregate the uploads (the round protocol), record the round. Returns no arrays
        (the global state is :attr:`state`; :meth:`arrays` converts it) and the round's counts."""
        rnd, self._round = self._round, None
        assert rnd is not None and rnd.round == server_round - 1, "configure_train first"
        t0 = time.perf_counter()
        answers: dict[int, Answer] = {}
        weights: dict[int, int] = {}
        uniform = self.config.client_weighting == "uniform"  # as Server.num_examples weighs clients
        for c, reply in self._replies(replies).items():
            answers[c], n = self._payload(c, reply, functools.partial(rnd.upload_limit, c), weighted=True)
            if n is not None:
                weights[c] = int(n > 0) if uniform else n
                self.examples[c] = n
        self.state, rec = rnd.finish(answers, weights)
        self.record(rec)
        return None, MetricRecord(
            {
                "clients-ok": len(rec.clients) - len(rec.failed),
                "clients-failed": len(rec.failed),
                "bytes-up": rec.bytes_up,
                "bytes-down": rec.bytes_down,
                "aggregate-seconds": time.perf_counter() - t0,
            }
        )

    def record(self, rec: RoundRecord) -> None:
        """Append a finished round to the history, with its privacy accounted (as the in-process
        :meth:`fedkernels.fl.Server.record`)."""
        if self.accountant is not None:
            if self.accountant.dp_sgd is not None:  # the counts a resumed run's accounting needs again
                for c in rec.contributed:
                    n = self.examples_of(c)
                    if n is not None:
                        rec.privacy[f"{EXAMPLES}{c}"] = float(n)
            self.accountant.add(rec)
        self.history.append(rec)

    def new_accountant(self):  # -> RunAccountant | None (the class needs the extra fedkernels[privacy])
        """The run's DP accountant (None without DP): here DP-SGD's sample-level epsilon, from the example
        counts the clients report with their uploads."""
        if self.config.train.dp_sample_clip is None:
            return None
        from ...fl.privacy.accounting import make_accountant

        return make_accountant(self.config.train, None, self.config.sample_delta, self.examples_of)

    def examples_of(self, client: int) -> int | None:
        """The example count ``client`` reported (sample-level accounting's batch rate; None: unknown)."""
        return self.examples.get(client)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """With ``federated_evaluation``, every ``eval_every`` rounds: the global state (one
        ArrayRecord shared by all messages) to the round's evaluation sample."""
        self._outbox = {}
        if not self.federated_evaluation or server_round % self.config.eval_every != 0:
            return []
        record = payload_to_record(ev.evaluation_payload(self.state))
        ks = list(ev.evaluation_ks(self.config.eval_k, self.dims[1]))
        sample = ev.evaluation_clients(self.config.seed, server_round - 1, self.num_clients, self.config.eval_clients)
        self._eval_sample = sample
        self._outbox = {
            c: self._message(
                c, MessageType.EVALUATE, f"evaluate-{server_round}", self._header(server_round - 1, c, 0, ks=ks), record
            )
            for c in sample
            if c in self.nodes.node_of
        }
        return list(self._outbox.values())

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The example-weighted P@k/nDCG@k of the sample's reports (also in ``history[-1].metrics``
        as ``fed-...``; a client whose report failed, or that has no node, is left out)."""
        if not self.federated_evaluation or server_round % self.config.eval_every != 0:
            return None
        ks = ev.evaluation_ks(self.config.eval_k, self.dims[1])
        limit = ev.evaluation_spec(ks).byte_limit()
        got = self._replies(replies)
        reports: dict[int, Answer] = {}
        for c in self._eval_sample:
            if c not in self._outbox:
                reports[c] = ClientFailed(self.nodes.failure(c))
            else:
                reports[c], _ = self._payload(c, got[c], lambda: limit)
        metrics, _failed, n = ev.aggregate_evaluation(reports, ks)
        if self.history:
            self.history[-1].metrics.update({f"fed-{k}": v for k, v in metrics.items()})
        return MetricRecord({**metrics, "num-examples": n})

    # ---- checkpoints -------------------------------------------------------------------------------
    def save_checkpoint(self, path: str | Path) -> None:
        """The in-process Server's checkpoint format: ``Server(...).load_checkpoint`` can resume it,
        and so can :meth:`load_checkpoint`."""
        meta = {
            "round": len(self.history),
            "history": [record_to_json(h) for h in self.history],
            **run_identity(self.strategy, self.config, self.num_clients),
        }
        save_checkpoint(path, self.state, meta)

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from a checkpoint of the same run (in-process or Flower), with the in-process
        Server's checks: the file's integrity and shapes, then its run identity (seed, strategy,
        options, TrainConfig, clients).

        Raises:
            PayloadError: not a checkpoint of this state's shapes, damaged, or malformed.
            ValueError: a checkpoint of another run (the message names what differs).
        """
        state, meta = load_checkpoint(path, self.state)
        check_identity(meta, run_identity(self.strategy, self.config, self.num_clients), path)
        self.state = to_device(state, self.device)  # checkpoints hold host tensors
        self.history = [record_from_json(h) for h in meta["history"]]
        self.resumed_from = len(self.history)
        for rec in self.history:
            for key, n in rec.privacy.items():
                if key.startswith(EXAMPLES):
                    self.examples[int(key[len(EXAMPLES) :])] = int(n)
        self.accountant = self.new_accountant()  # composes the checkpoint's rounds, whatever this run's flags
        if self.accountant is not None:
            for rec in self.history:
                self.accountant.add(rec)

    # ---- the fedkernels protocol -------------------------------------------------------------------
    def _message(
        self, c: int, kind: str, group: str, header: ConfigRecord, payload: ArrayRecord | None = None
    ) -> Message:
        records: dict = {pr.KEY: header}
        if payload is not None:
            records[pr.PAYLOAD] = payload
        return Message(RecordDict(records), self.nodes.node_of[c], kind, group_id=group, ttl=self._ttl())

    def _ttl(self) -> float:
        """Every message's time-to-live: the longest an exchange may wait (Flower's default at most)."""
        return min(deadline_ttl(self.timeout, self.num_clients), float(DEFAULT_TTL))

    def _header(self, r: int, c: int, seed: int, **extra: list[int] | str) -> ConfigRecord:
        t = self.config.train
        return ConfigRecord(
            {
                "round": r,
                "client-id": c,
                "seed": seed,
                "identity": self.digest,
                "run-seed": self.config.seed,
                "num-features": self.dims[0],
                "num-classes": self.dims[1],
                "epochs": t.epochs,
                "batch-size": t.batch_size,
                "lr": float(t.lr),
                "optimizer": t.optimizer,
                "weight-decay": float(t.weight_decay),
                "autocast": t.autocast,
                "dp-sample-clip": float(t.dp_sample_clip or 0.0),  # 0: no DP-SGD
                "dp-sample-noise": float(t.dp_sample_noise),
                "dp-sample-seeded": int(t.dp_sample_seeded),
                **extra,
            }
        )

    def _send(self, grid: Grid, messages: Iterable[Message]) -> list[Message]:
        """Push ``messages`` and collect their replies under the queue-aware deadline."""
        batch = dict(enumerate(messages))
        self.messages_sent.update(m.metadata.message_type for m in batch.values())
        return list(exchange(grid, batch, self.timeout, self.max_in_flight).values())

    def _replies(self, replies: Iterable[Message]) -> dict[int, Message | None]:
        """Each outbox client's reply (``None``: none came), matched by message id and source node."""
        self._online = None
        by_id = {m.metadata.message_id: c for c, m in self._outbox.items()}
        out: dict[int, Message | None] = dict.fromkeys(self._outbox)
        for m in replies:
            c = by_id.get(m.metadata.reply_to_message_id)
            if c is None or out[c] is not None:
                continue
            if not m.has_error() and m.metadata.src_node_id != self._outbox[c].metadata.dst_node_id:
                continue
            out[c] = m
        return out

    def _payload(
        self, c: int, reply: Message | None, limit: Callable[[], int], weighted: bool = False
    ) -> tuple[Answer, int | None]:
        """Client ``c``'s payload bytes in ``reply`` (checked against ``limit()`` bytes before any
        tensor is built), or the failure to record; with ``weighted``, also its example count."""
        node = self._outbox[c].metadata.dst_node_id
        if reply is None or reply.has_error():
            if self._online is None and self._grid is not None:
                self._online = set(self._grid.get_node_ids())
            if self._online is not None and node not in self._online:
                return ClientFailed(GONE), None
            return (ClientFailed(TIMED_OUT) if reply is None else ClientFailed(f"crashed: {reply.error.reason}")), None
        try:
            head = reply.content.config_records.get(pr.KEY)
            if head is None:
                raise pl.PayloadError(f"reply carries no {pr.KEY!r} record")
            if pr.int_field(head, "client-id") != c:
                raise pl.PayloadError(f"reply names client {head.get('client-id')!r}, sent to client {c}")
            n = None
            if weighted:
                n = pr.int_field(head, "num-examples")
                if not 0 <= n <= ev.MAX_EXAMPLES:
                    raise pl.PayloadError(f"message field 'num-examples' must be in [0, {ev.MAX_EXAMPLES}], got {n}")
            if pr.PAYLOAD not in reply.content:
                return None, n
            tag = head.get(pr.ROUND_TAG_FIELD)
            if tag is not None and not (isinstance(tag, str) and len(tag) <= pr.MAX_ROUND_TAG):
                raise pl.PayloadError(f"message field {pr.ROUND_TAG_FIELD!r} must be a short string")
            meta = None if tag is None else {ROUND_TAG: tag}  # checked by the round protocol (replays)
            return record_to_bytes(reply.content[pr.PAYLOAD], limit(), meta), n
        except pl.PayloadError as e:
            return e, None

    def _refresh(self, grid: Grid, r: int, startup_wait: float | None = None) -> None:
        """Update the client-to-node map: drop nodes that left, identify the ones never asked (with
        ``startup_wait``: before round 1, that long for replies, no refusal for silence)."""
        self._refreshed = r
        if self.nodes.partition_keys is not None:
            infos = {int(n.node_id): bytes(n.public_key) for n in grid.get_nodes()}
        else:
            infos = {int(n): b"" for n in grid.get_node_ids()}
        online = set(infos)
        self.nodes.refresh(r, online)
        unknown = self.nodes.unknown(online)
        if not unknown:
            return
        head = ConfigRecord({"identity": self.digest, "version": pr.fedkernels_version()})
        msgs = {
            node: Message(RecordDict({pr.KEY: head}), node, pr.IDENTIFY, group_id="identify", ttl=self._ttl())
            for node in unknown
        }
        self.messages_sent[pr.IDENTIFY] += len(msgs)
        got = exchange(grid, msgs, startup_wait or self.timeout, self.max_in_flight)
        for node in unknown:
            reply = got.get(node)
            if reply is None or reply.has_error() or pr.KEY not in reply.content.config_records:
                if startup_wait is not None:  # not counted: asked again on the next pass
                    continue
                tries = self._identify_tries[node] = self._identify_tries.get(node, 0) + 1
                why = "no reply" if reply is None else "an error" if reply.has_error() else "no header"
                self.nodes.fail_identify(r, node, f"identify query: {why} (try {tries})")
                if tries >= MAX_IDENTIFY_TRIES:
                    self.nodes.claim(r, node, None, None, f"did not answer the identify query {tries} times")
                continue
            info = reply.content.config_records[pr.KEY]
            refusal = pr.identity_mismatch(self.identity, info.get("identity"))
            self.nodes.claim(r, node, info.get("client-id"), infos.get(node) or None, refusal)

    def _setup(self, grid: Grid) -> None:
        """The strategy's setup exchange (if any): every identified client's report, checked."""
        self.setup_failed = {}
        if not has_setup_exchange(self.strategy):
            return
        spec = self.strategy.setup_report_spec(self.state)
        limit = bounded(spec, self.config.max_upload_bytes).byte_limit() if spec is not None else 0
        self._outbox = {
            c: self._message(c, pr.SETUP, "setup", self._header(-1, c, 0)) for c in sorted(self.nodes.node_of)
        }
        got = self._replies(self._send(grid, self._outbox.values()))
        reports: dict[int, Answer] = {c: self._payload(c, got[c], lambda: limit)[0] for c in self._outbox}
        seed = derive_seed(self.config.seed, "setup")
        self.setup_failed, self.setup_bytes_up, self.state = setup_exchange(
            self.strategy, self.state, reports, seed, self.config.max_upload_bytes
        )
        for c in range(self.num_clients):
            if c not in self.nodes.node_of:
                self.setup_failed[c] = self.nodes.failure(c)

    def _ask_requests(self, grid: Grid, rnd: Round) -> dict[int, Answer]:
        """The live chosen clients' raw requests (``None``: it made none)."""
        seeds, limit = rnd.seeds(), rnd.request_limit()
        self._outbox = {
            c: self._message(c, pr.REQUEST, f"request-{rnd.round}", self._header(rnd.round, c, seed))
            for c, seed in seeds.items()
        }
        got = self._replies(self._send(grid, self._outbox.values()))
        return {c: self._payload(c, got[c], lambda: limit)[0] for c in seeds}
