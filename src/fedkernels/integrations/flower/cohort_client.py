"""The client side of cohort nodes: a ``ClientApp`` whose SuperNode serves a shard of the clients.

Each round the node gets one message naming the sampled clients of its shard, their seeds and their
downloads (each distinct download once), and trains them as the in-process loop does: through
:class:`fedkernels.fl.server.InProcessTransport` over :class:`~fedkernels.fl.client.LocalClient`
endpoints, so the batched pass (:mod:`fedkernels.fl.batched`) runs where the in-process loop would run
it (the header's ``batch-clients``, the strategy, device and training settings decide), else the
sequential loop. The reply carries every client's upload as its own ArrayRecord with its example count
and round tag; the server checks each as it checks a one-client node's (:mod:`.cohort_server`).

A node loads a client's data only when that client is sampled (``load_data(context, client_id)``) and
keeps at most ``cache_clients`` clients' data (least recently used out first), so its memory grows
with its cohort, not with its shard.

What a node holds (its strategy, initialised once per run, and its cached clients) lives in this
process, not in the ClientApp object: Flower's simulation engine ships the ClientApp to its Ray worker
with every message (a fresh unpickled copy each time), so state kept in the app would be rebuilt per
message. Each app carries a token; its copies in one process find the same nodes by it.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from ...fl import payload as pl
from ...fl.client import ROUND_TAG, ClientEndpoint, LocalClient
from ...fl.round import Carried
from ...fl.seeding import derive_seed
from ...fl.server import InProcessTransport
from ...fl.strategy import Strategy
from ...fl.types import ClientData
from . import protocol as pr
from .client import node_device, train_config
from .records import bytes_to_record, payload_to_record, record_to_payload
from .shards import node_shard

DEFAULT_CACHE_CLIENTS = 256
MAX_NODES = 16  # cohort nodes (of any apps and runs) one process keeps, least recently used out first


@dataclass
class _Cohort:
    """What one cohort node of one run holds in this process."""

    strategy: Strategy
    identity: str
    run_key: str = ""
    data: OrderedDict[int, ClientData] = field(default_factory=OrderedDict)


# (app token, run, node) -> its cohort state, in this process (a simulation worker serves several nodes)
_NODES: OrderedDict[tuple[str, int, int], _Cohort] = OrderedDict()


def _cohort_of(token: str, context: Context, make_strategy: Callable[[Context], Strategy]) -> _Cohort:
    """The cohort state of node ``context.node_id`` of run ``context.run_id`` of the app ``token``
    in this process, made on first use. A module-level function (pickled by reference), so the
    app's closures reach this process's ``_NODES``, not a copy pickled with them."""
    key = (token, context.run_id, context.node_id)
    if key not in _NODES:
        strategy = make_strategy(context)
        _NODES[key] = _Cohort(strategy, pr.run_identity(strategy))
        while len(_NODES) > MAX_NODES:
            _NODES.popitem(last=False)
    _NODES.move_to_end(key)
    return _NODES[key]


def cohort_client_app(
    make_strategy: Callable[[Context], Strategy],
    load_data: Callable[[Context, int], ClientData],
    wrap: Callable[[Context, int, ClientEndpoint], ClientEndpoint] | None = None,
    mods: Sequence[Callable] | None = None,
    cache_clients: int = DEFAULT_CACHE_CLIENTS,
    dp_noise_seed: int | None = None,
) -> ClientApp:
    """A Flower ClientApp for a cohort node (:mod:`.cohort_server`): it serves the shard
    :func:`~.shards.node_shard` names.

    Args:
        make_strategy: builds the same strategy as the server's (checked by the run identity).
        load_data: ``(context, client_id) -> ClientData``: one client's local training data, called
            only for clients of this node's shard when they are sampled.
        wrap: optional ``(context, client_id, endpoint) -> endpoint`` (e.g. a fault injector); a
            wrapped client keeps its round on the sequential loop, as in process.
        mods: Flower ClientApp mods, outermost first.
        cache_clients: how many clients' data one node keeps between rounds (least recently used out).
        dp_noise_seed: private rounds with distributed DP (:mod:`.cohort_private_client`): None draws
            each client's noise share from OS randomness; a seed makes it reproducible (experiments).

    Raises:
        ValueError: ``cache_clients`` < 1.
    """
    if cache_clients < 1:
        raise ValueError(f"cache_clients must be >= 1, got {cache_clients}")
    app = ClientApp(mods=list(mods) if mods else None)
    token = uuid.uuid4().hex  # pickled with the app: its copies in one process share their nodes

    def cohort(context: Context) -> _Cohort:
        return _cohort_of(token, context, make_strategy)

    def data(context: Context, node: _Cohort, client: int) -> ClientData:
        if client in node.data:
            node.data.move_to_end(client)
        else:
            node.data[client] = load_data(context, client)
            while len(node.data) > cache_clients:
                node.data.popitem(last=False)
        return node.data[client]

    def header(message: Message) -> ConfigRecord:
        rec = message.content.config_records.get(pr.KEY)
        if rec is None:
            raise pl.PayloadError(f"message carries no {pr.KEY!r} record")
        return rec

    def local(context: Context, h: ConfigRecord) -> tuple[_Cohort, dict[int, int]]:
        """This node (its strategy initialised as the server's) and the message's client -> seed,
        after checking the run identity and that every client is in this node's shard."""
        node = cohort(context)
        if h.get("identity") != pr.identity_digest(node.identity):
            raise pl.PayloadError(
                "the server's run identity differs from this node's (fedkernels version or strategy options)"
            )
        clients, seeds = pr.int_list_field(h, "clients"), pr.int_list_field(h, "seeds")
        if len(clients) != len(seeds) or len(set(clients)) != len(clients):
            raise pl.PayloadError("message fields 'clients' and 'seeds' must be equally long, clients distinct")
        start, stop = node_shard(context.node_config, pr.int_field(h, "num-clients"))
        outside = [c for c in clients if not start <= c < stop]
        if outside:
            raise pl.PayloadError(f"clients {outside[:8]} are not in this node's shard [{start}, {stop})")
        run_key = repr(tuple(h.get(f) for f in ("run-seed", "num-features", "num-classes")))
        if node.run_key != run_key:
            node.strategy.init_state(
                pr.int_field(h, "num-features"),
                pr.int_field(h, "num-classes"),
                derive_seed(pr.int_field(h, "run-seed"), "init"),
            )
            node.run_key = run_key
        return node, dict(zip(clients, seeds, strict=True))

    def endpoints(
        context: Context, node: _Cohort, h: ConfigRecord, clients: list[int]
    ) -> tuple[dict[int, ClientEndpoint], dict[int, int]]:
        """The clients' endpoints (honest, or as ``wrap`` makes them) and their example counts."""
        train, device = train_config(h), node_device(context)
        out: dict[int, ClientEndpoint] = {}
        examples: dict[int, int] = {}
        for c in clients:
            local_data = data(context, node, c)
            end: ClientEndpoint = LocalClient(node.strategy, local_data, train, device)
            out[c], examples[c] = (wrap(context, c, end) if wrap is not None else end), len(local_data)
        return out, examples

    def reply(message: Message, answers: Mapping[int, object], examples: Mapping[int, int] | None) -> Message:
        """Each client's answer (bytes, a carried payload, None or its exception) as the reply."""
        head: dict[str, Any] = {"clients": [], "round-tags": [], "failed": [], "failed-reasons": []}
        if examples is not None:
            head["num-examples"] = []
        records: dict = {}
        for c, answer in answers.items():
            if isinstance(answer, BaseException):
                head["failed"].append(c)
                head["failed-reasons"].append(f"{type(answer).__name__}: {answer}"[: pr.MAX_REASON_CHARS])
                continue
            head["clients"].append(c)
            tag = ""
            if isinstance(answer, Carried):
                records[pr.cohort_key(c)] = payload_to_record(answer.payload)
                tag = answer.metadata.get(ROUND_TAG, "")
            elif isinstance(answer, bytes) and answer:
                records[pr.cohort_key(c)] = bytes_to_record(answer)
                tag = pl.read_metadata(answer).get(ROUND_TAG, "")
            head["round-tags"].append(tag)
            if examples is not None:
                head["num-examples"].append(examples[c])
        return Message(RecordDict({pr.KEY: ConfigRecord(head), **records}), reply_to=message)

    @app.query("fedkernels_identify")
    def identify(message: Message, context: Context) -> Message:
        """This node's shard, fedkernels version and run identity: no data is loaded."""
        node = cohort(context)
        start, stop = node_shard(context.node_config, pr.int_field(header(message), "num-clients"))
        head: dict[str, Any] = {"mode": pr.COHORT, "shard-start": start, "shard-stop": stop}
        head.update(identity=node.identity, version=pr.fedkernels_version())
        return Message(RecordDict({pr.KEY: ConfigRecord(head)}), reply_to=message)

    @app.query("fedkernels_cohort_request")
    def request(message: Message, context: Context) -> Message:
        h = header(message)
        node, seeds = local(context, h)
        ends, _ = endpoints(context, node, h, list(seeds))
        transport = InProcessTransport(_by_id(ends), None)
        return reply(message, transport.requests(pr.int_field(h, "round"), seeds), None)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        h = header(message)
        node, seeds = local(context, h)
        which = pr.int_list_field(h, "download-of")
        if len(which) != len(seeds):
            raise pl.PayloadError("message field 'download-of' must name one download per client")
        downloads: dict[int, pl.Payload] = {}
        records = message.content.array_records  # built anew on every access: read it once
        for i in sorted(set(which)):
            record = records.get(f"{pr.COHORT_DOWNLOAD}{i}")
            if not isinstance(record, ArrayRecord):
                raise pl.PayloadError(f"message carries no download {i}")
            downloads[i] = record_to_payload(record)
        ends, examples = endpoints(context, node, h, list(seeds))
        # the in-process transport: the batched pass where the in-process loop takes it, else one by one
        transport = InProcessTransport(_by_id(ends), None, bool(pr.int_field(h, "batch-clients")))
        carried = {c: Carried(downloads[i], 0) for c, i in zip(seeds, which, strict=True)}
        answers = transport.updates(pr.int_field(h, "round"), dict(carried), seeds)
        return reply(message, answers, examples)

    @app.query("fedkernels_cohort_private")
    def private(message: Message, context: Context) -> Message:
        """One stage of a private round for the named clients, each its own SecAgg+ participant
        (:mod:`.cohort_private_client`, the privacy extra)."""
        from .cohort_private_client import answer_cohort_private

        h = header(message)
        node, seeds = local(context, h)
        got = {c: data(context, node, c) for c in seeds}
        answers = answer_cohort_private(
            h, message, context, node.strategy, got, seeds, train_config(h), node_device(context), dp_noise_seed
        )
        return reply(message, answers, None)

    return app


def _by_id(endpoints: dict[int, ClientEndpoint]) -> list[ClientEndpoint]:
    """``endpoints`` for :class:`~fedkernels.fl.server.InProcessTransport`, which only indexes its
    endpoints by client id (a dict of the cohort's clients does that without a list of the shard)."""
    return cast("list[ClientEndpoint]", endpoints)
