"""Cohort nodes: a Flower mode where each SuperNode serves a shard of the clients, so the number of
Flower nodes is the number of machines or workers, not of clients.

:class:`CohortFlowerStrategy` is :class:`~.server.FlowerStrategy` with one message per node and round
instead of one per client: the round's sampled clients (the round protocol's selection, seeds and
downloads, :mod:`fedkernels.fl.round`) are grouped by the node whose shard holds them
(:mod:`.shards`), each node gets their ids, seeds and downloads (each distinct download once) and
trains them (:mod:`.cohort_client`: the batched pass where the in-process loop would take it, else the
sequential loop), and its reply carries every client's upload as its own ArrayRecord with its example
count and round tag. The server splits the reply and checks each upload as a one-client node's:
per-client byte bound before any tensor is built, spec, strategy check, round tag, then the round
protocol's aggregation, so a cohort run ends as the in-process run with the same seed.

A strategy with client requests (FedSS, FedAwS) first gets one request query per node. A request
depends on the client's data, round and seed, never on the model, so the next round's queries go out
as soon as a round's train replies are in, and the nodes answer while the server aggregates; the next
round takes those answers if its refreshed shard map still gives each node the same clients, else it
drops them unread and asks again.

A reply is checked as a whole before any upload in it is read (:mod:`.cohort_replies`): it may name
only clients sent to that node, each once, and carry no more uploads than it was sent clients;
otherwise every client of that node fails the round with the reason ("rejected: ..."). A sampled
client the reply leaves out fails alone ("sent no upload: missing from its node's reply").

Secure aggregation and client-level DP, with the masking per client: :mod:`.cohort_private_server`.
Not in this mode (refused when asked for): federated evaluation, strategies with a setup exchange, and
SuperNode keys tied to clients.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid

from ...fl import payload as pl
from ...fl.round import (
    Answer,
    ClientFailed,
    Round,
    Upload,
    client_seed,
    has_setup_exchange,
    select_clients,
    tensor_identity,
)
from ...fl.server import RunConfig
from ...fl.strategy import Strategy
from . import protocol as pr
from .app import PRIVACY_KEYS, REMOVED_PRIVACY_KEYS, run_config_from
from .cohort_replies import split_reply
from .exchange import PendingExchange, exchange
from .nodes import GONE
from .records import ArrayCache, payload_to_record
from .server import DEFAULT_STARTUP_GRACE, MAX_IDENTIFY_TRIES, TIMED_OUT, FlowerStrategy
from .shards import ShardRegistry

COHORT_MAX_POLL = 0.05  # seconds between pulls at most while node replies are awaited
Sent = dict[int, tuple[Message, list[int]]]  # node -> (its message, its clients)


@dataclasses.dataclass
class _EarlyRequests:
    """A round's request queries pushed before the round (while the last one aggregates)."""

    round: int
    seeds: dict[int, int]  # the clients asked (the chosen ones with a node then) and their seeds
    sent: Sent
    pending: PendingExchange[int]

    @property
    def asked(self) -> dict[int, list[int]]:
        """node -> the clients it was asked for."""
        return {node: clients for node, (_, clients) in self.sent.items()}


class CohortFlowerStrategy(FlowerStrategy):
    """A fedkernels strategy over Flower with cohort nodes (each node serves a shard of clients).

    Args:
        strategy, num_features, num_classes, num_clients, config: as for
            :class:`~.server.FlowerStrategy`; ``config.batch_clients`` lets the nodes train their
            cohorts in one batched pass (as it lets the in-process Server), ``config.client_timeout``
            is per node message (a node's whole cohort).
        startup_grace, max_in_flight: as for :class:`~.server.FlowerStrategy`.

    Attributes:
        nodes: the :class:`~.shards.ShardRegistry` (shard map, refusals, events).
        Others as :class:`~.server.FlowerStrategy`.

    Raises:
        NotImplementedError: a strategy with a setup exchange, or ``federated_evaluation``.
        ValueError: ``partition_keys`` (keys name clients; cohort nodes serve shards).
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
        if has_setup_exchange(strategy):
            raise NotImplementedError(
                f"cohort nodes: strategy {strategy.name} has a setup exchange, which cohort nodes do not carry; "
                "run it with one node per client (FlowerStrategy)"
            )
        if federated_evaluation:
            raise NotImplementedError("cohort nodes: federated evaluation is not carried; evaluate centrally")
        if partition_keys is not None:
            raise ValueError("cohort nodes: partition_keys ties clients to node keys; cohort nodes serve shards")
        super().__init__(
            strategy, num_features, num_classes, num_clients, config, startup_grace=startup_grace,
            max_in_flight=max_in_flight,
        )  # fmt: skip
        self.nodes: ShardRegistry = ShardRegistry(num_clients)  # type: ignore[assignment]
        self._sent: Sent = {}
        self._early: _EarlyRequests | None = None

    # ---- one round -----------------------------------------------------------------------------
    def train_round(self, grid: Grid, server_round: int) -> MetricRecord | None:
        """One round: its train exchange; then, before aggregating it, the next round's request
        queries go out (a request depends on the client's data, round and seed, not on the state), so
        the nodes answer them while the server aggregates."""
        train = self.configure_train(server_round, ArrayRecord(), ConfigRecord(), grid)
        replies = self._push(grid, train)
        if self.rounds_planned is not None and server_round < self.rounds_planned:
            self._ask_early(grid, server_round)  # round index server_round is the next round
        return self.aggregate_train(server_round, replies)[1]

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Refresh the shard map, select the round's clients, ask the requests (one message per node,
        if the strategy takes any: those asked early if they were) and build one train message per node."""
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
        asked = self._cohort_requests(grid, rnd) if rnd.wants_requests() else {}
        seeds, cache = rnd.seeds(), ArrayCache()
        downloads = rnd.download_payloads(asked)  # as tensors: the nodes get Arrays
        self._sent = {}
        for node, clients in self._by_node(list(downloads)).items():
            distinct: dict[tuple, int] = {}  # a download's tensors -> its index in the message
            records: dict[str, Any] = {}
            which = []
            for c in clients:
                key = tuple((name, *tensor_identity(t)) for name, t in sorted(downloads[c].items()))
                i = distinct.setdefault(key, len(distinct))
                if f"{pr.COHORT_DOWNLOAD}{i}" not in records:
                    records[f"{pr.COHORT_DOWNLOAD}{i}"] = payload_to_record(downloads[c], cache)
                which.append(i)
            head = self._cohort_header(r, clients, seeds, **{"download-of": which})
            msg = Message(
                RecordDict({pr.KEY: head, **records}),
                node,
                MessageType.TRAIN,
                group_id=str(server_round),
                ttl=self._ttl(),
            )
            self._sent[node] = (msg, clients)
        return [m for m, _ in self._sent.values()]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Split each node's reply into its clients' uploads, check and aggregate them (the round
        protocol), record the round."""
        rnd, self._round = self._round, None
        assert rnd is not None and rnd.round == server_round - 1, "configure_train first"
        t0 = time.perf_counter()
        uniform = self.config.client_weighting == "uniform"
        answers: dict[int, Upload] = {}
        weights: dict[int, int] = {}
        for node, reply in self._match(replies).items():
            got, examples = self._split(node, reply, rnd.upload_limit, weighted=True, carried=True)
            answers.update(got)
            for c, n in examples.items():
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

    # ---- the cohort protocol ---------------------------------------------------------------------
    def _by_node(self, clients: list[int]) -> dict[int, list[int]]:
        """The live ``clients`` grouped by serving node, ascending within each node."""
        out: dict[int, list[int]] = {}
        for c in sorted(clients):
            out.setdefault(self.nodes.node_of[c], []).append(c)
        return out

    def _cohort_header(self, r: int, clients: list[int], seeds: Mapping[int, int], **extra: Any) -> ConfigRecord:
        head = self._header(r, -1, 0)
        head["clients"] = list(clients)
        head["seeds"] = [seeds[c] for c in clients]
        head["num-clients"] = self.num_clients
        head["batch-clients"] = int(self.config.batch_clients)
        for k, v in extra.items():
            head[k] = v
        return head

    def _push(self, grid: Grid, messages: Iterable[Message]) -> list[Message]:
        batch = dict(enumerate(messages))
        self.messages_sent.update(m.metadata.message_type for m in batch.values())
        # a node's reply takes a whole cohort's work: poll often (few messages are out, pulls are cheap)
        return list(exchange(grid, batch, self.timeout, self.max_in_flight, max_poll=COHORT_MAX_POLL).values())

    def _match(self, replies: Iterable[Message], sent: Sent | None = None) -> dict[int, Message | None]:
        """Each messaged node's reply (None: none came), matched by message id and source node
        (``sent``: the messages, default the last exchange's)."""
        sent = self._sent if sent is None else sent
        self._online = None
        by_id = {m.metadata.message_id: node for node, (m, _) in sent.items()}
        out: dict[int, Message | None] = dict.fromkeys(sent)
        for m in replies:
            node = by_id.get(m.metadata.reply_to_message_id)
            if node is None or out[node] is not None:
                continue
            if not m.has_error() and m.metadata.src_node_id != node:
                continue
            out[node] = m
        return out

    def _split(
        self,
        node: int,
        reply: Message | None,
        limit: Callable[[int], int],
        weighted: bool,
        carried: bool = False,
        sent: Sent | None = None,
    ) -> tuple[dict[int, Upload], dict[int, int]]:
        """Node ``node``'s reply as each of its clients' answer (payload bytes, or with ``carried`` its
        tensors, checked against ``limit(client)`` before any tensor is built, ``None``, or the failure
        to record) and, with ``weighted``, each answering client's example count (``sent``: the
        messages, default the last exchange's)."""
        _, clients = (self._sent if sent is None else sent)[node]
        if reply is None or reply.has_error():
            if self._online is None and self._grid is not None:
                self._online = set(self._grid.get_node_ids())
            if self._online is not None and node not in self._online:
                why = ClientFailed(GONE)
            elif reply is None:
                why = ClientFailed(TIMED_OUT)
            else:
                why = ClientFailed(f"crashed: {reply.error.reason}"[: pr.MAX_REASON_CHARS])
            return dict.fromkeys(clients, why), {}
        try:
            return split_reply(reply, clients, limit, weighted, carried)
        except pl.PayloadError as e:  # the reply as a whole is malformed: every client of the node fails
            return dict.fromkeys(clients, e), {}

    def _request_messages(self, r: int, seeds: Mapping[int, int]) -> Sent:
        """One request query per node for round ``r``'s live clients ``seeds`` (client -> seed)."""
        sent: Sent = {}
        for node, clients in self._by_node(list(seeds)).items():
            msg = Message(
                RecordDict({pr.KEY: self._cohort_header(r, clients, seeds)}),
                node,
                pr.COHORT_REQUEST,
                group_id=f"request-{r}",
                ttl=self._ttl(),
            )
            sent[node] = (msg, clients)
        self.messages_sent[pr.COHORT_REQUEST] += len(sent)
        return sent

    def _ask_early(self, grid: Grid, r: int) -> None:
        """Push round ``r``'s request queries now (its clients selected as its :meth:`configure_train`
        will, over the shard map as it stands), to be collected there; nothing if the strategy takes
        none."""
        self._early = None
        if self.strategy.request_spec(self.state) is None:
            return
        chosen = select_clients(self.config.seed, r, self.num_clients, self.config.clients_per_round)
        seeds = {c: client_seed(self.config.seed, r, c) for c in chosen if c in self.nodes.node_of}
        sent = self._request_messages(r, seeds)
        self._early = _EarlyRequests(r, seeds, sent, self._send_queries(grid, sent))

    def _send_queries(self, grid: Grid, sent: Sent) -> PendingExchange[int]:
        """Push one query per node (``sent``); its replies keyed by node when collected."""
        batch = {node: m for node, (m, _) in sent.items()}
        return PendingExchange(grid, batch, self.timeout, self.max_in_flight, max_poll=COHORT_MAX_POLL)

    def _cohort_requests(self, grid: Grid, rnd: Round) -> dict[int, Answer]:
        """The live chosen clients' raw requests, one query per node (``None``: it made none): those
        asked early (:meth:`_ask_early`) if the round's refreshed shard map still gives the same nodes
        the same clients (else, e.g. a node left or joined since, they are dropped and all asked now)."""
        seeds, limit = rnd.seeds(), rnd.request_limit()
        early, self._early = self._early, None
        if (
            early is not None
            and early.round == rnd.round
            and early.seeds == seeds
            and early.asked == self._by_node(list(seeds))
        ):
            sent, pending = early.sent, early.pending
        else:
            sent = self._request_messages(rnd.round, seeds)
            pending = self._send_queries(grid, sent)
        got = pending.collect()
        out: dict[int, Answer] = {}
        for node, reply in self._match(got.values(), sent).items():
            split, _ = self._split(node, reply, lambda c: limit, weighted=False, sent=sent)
            out.update(cast("dict[int, Answer]", split))  # not carried: bytes, never Carried
        return out

    def _refresh(self, grid: Grid, r: int, startup_wait: float | None = None) -> None:
        """Update the shard map: drop nodes that left, ask the ones never asked which shard they serve."""
        self._refreshed = r
        online = {int(n) for n in grid.get_node_ids()}
        self.nodes.refresh(r, online)
        unknown = self.nodes.unknown(online)
        if not unknown:
            return
        head = ConfigRecord(
            {"identity": self.digest, "version": pr.fedkernels_version(), "num-clients": self.num_clients}
        )
        msgs = {
            node: Message(RecordDict({pr.KEY: head}), node, pr.IDENTIFY, group_id="identify", ttl=self._ttl())
            for node in unknown
        }
        self.messages_sent[pr.IDENTIFY] += len(msgs)
        got = exchange(grid, msgs, startup_wait or self.timeout, self.max_in_flight)
        for node in unknown:
            reply = got.get(node)
            if reply is None or reply.has_error() or pr.KEY not in reply.content.config_records:
                if startup_wait is not None:
                    continue
                tries = self._identify_tries[node] = self._identify_tries.get(node, 0) + 1
                why = "no reply" if reply is None else "an error" if reply.has_error() else "no header"
                self.nodes.fail_identify(r, node, f"identify query: {why} (try {tries})")
                if tries >= MAX_IDENTIFY_TRIES:
                    self.nodes.claim(r, node, None, None, f"did not answer the identify query {tries} times")
                continue
            info = reply.content.config_records[pr.KEY]
            refusal = pr.identity_mismatch(self.identity, info.get("identity"))
            if refusal is None and info.get("mode") != pr.COHORT:
                refusal = f"not a cohort node (it claims client {info.get('client-id')!r}; start cohort_client_app)"
            self.nodes.claim(r, node, info.get("shard-start"), info.get("shard-stop"), refusal)


def cohort_strategy_from(
    context: Context,
    strategy: Strategy,
    num_features: int,
    num_classes: int,
    num_clients: int | None = None,
    **defaults: object,
) -> CohortFlowerStrategy:
    """A :class:`CohortFlowerStrategy` from ``run_config`` (the keys of
    :func:`~.app.flower_strategy_from`, less ``federated-eval`` and ``partition-keys``); when it asks
    for secure aggregation or client-level DP, a
    :class:`~.cohort_private_server.CohortPrivateFlowerStrategy`, a subclass (key ``colluding-nodes`` too).

    Raises:
        ValueError: an invalid privacy setting (the message names the key).
    """
    c = context.run_config
    n = int(c["num-clients"]) if num_clients is None else num_clients
    if _asks_privacy(context):  # private rounds: each client its own SecAgg+ participant
        from .cohort_private_server import cohort_private_strategy_from

        return cohort_private_strategy_from(context, strategy, num_features, num_classes, n, **defaults)
    config = run_config_from(context, **defaults)
    if "batch-clients" in c:
        config = dataclasses.replace(config, batch_clients=bool(c["batch-clients"]))
    return CohortFlowerStrategy(
        strategy,
        num_features,
        num_classes,
        n,
        config,
        startup_grace=float(c.get("startup-grace", DEFAULT_STARTUP_GRACE)),
        max_in_flight=int(c.get("max-in-flight", 0)) or None,
    )


def _asks_privacy(context: Context) -> bool:
    """Whether ``run_config`` asks for secure aggregation or client-level DP (as
    :func:`~.app.flower_strategy_from` reads it: a key at its unset value asks for nothing)."""
    c = context.run_config
    if not any(k in c for k in PRIVACY_KEYS + REMOVED_PRIVACY_KEYS):
        return False
    try:
        from .private_server import privacy_config_from
    except ModuleNotFoundError:  # without the privacy extra: the two switches themselves
        return bool(c.get("secagg", False)) or float(c.get("dp-clip", 0) or 0) != 0
    return privacy_config_from(context) is not None
