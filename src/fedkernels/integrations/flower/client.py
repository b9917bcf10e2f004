"""The client side over Flower: a ``ClientApp`` that answers fedkernels messages on a SuperNode.

Each node loads only its own data (``load_data(context)``), and only when a message needs it (a
train, setup or evaluation message; never the identify query). Flower may run one ``ClientApp``
process for many nodes (the simulation engine's workers serve every virtual node, a long-lived
``--isolation process`` app serves many messages), so what a node loaded is cached in this process,
keyed by run and node, for at most ``cache_nodes`` nodes (least recently used first out): the
memory of a worker stays bounded whatever the number of nodes.
"""

from __future__ import annotations

import functools
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from ...fl import evaluation as ev
from ...fl import payload as pl
from ...fl.client import ROUND_TAG, ClientEndpoint, LocalClient
from ...fl.device import resolve_device
from ...fl.privacy_settings import check_dp_sgd
from ...fl.seeding import derive_seed
from ...fl.strategy import Strategy
from ...fl.types import ClientData, TrainConfig
from . import protocol as pr
from .records import bytes_to_record, record_to_bytes

DEFAULT_CACHE_NODES = 16
_HEADER_RUN_FIELDS = (
    "run-seed",
    "num-features",
    "num-classes",
    "epochs",
    "batch-size",
    "lr",
    "optimizer",
    "weight-decay",
    "autocast",
    "dp-sample-clip",
    "dp-sample-noise",
    "dp-sample-seeded",
)


@dataclass
class _Node:
    """What one node of one run holds in this process."""

    strategy: Strategy
    identity: str
    run_key: str = ""  # the header's run fields the endpoint was built for
    endpoint: ClientEndpoint | None = None
    data: dict[bool, ClientData] = field(default_factory=dict)  # held-out? -> data


class _NodeCache:
    """Per-process LRU of :class:`_Node` keyed by (app, run id, node id)."""

    def __init__(self) -> None:
        self.nodes: OrderedDict[tuple[str, int, int], _Node] = OrderedDict()

    def get(self, key: tuple[str, int, int], make: Callable[[], _Node], limit: int) -> _Node:
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = make()
            while len(self.nodes) > max(1, limit):
                self.nodes.popitem(last=False)
        self.nodes.move_to_end(key)
        return node


_CACHE = _NodeCache()  # module level: it outlives the ClientApp objects Flower unpickles per message


def train_config(header: ConfigRecord) -> TrainConfig:
    """The local-training settings a message header carries (:meth:`FlowerStrategy._header`), DP-SGD's
    included (``dp-sample-clip`` 0: no DP-SGD).

    Raises:
        PayloadError: a field is missing or of the wrong type, or a DP-SGD field is negative.
    """
    clip, noise = pr.float_field(header, "dp-sample-clip"), pr.float_field(header, "dp-sample-noise")
    try:  # the check every path makes (0: no DP-SGD); NaN, infinities and negatives are refused
        check_dp_sgd(clip or None, noise, lambda name: "message field " + name.replace("_", "-"))
    except ValueError as e:
        raise pl.PayloadError(str(e)) from None
    return TrainConfig(
        pr.int_field(header, "epochs"),
        pr.int_field(header, "batch-size"),
        pr.float_field(header, "lr"),
        pr.str_field(header, "optimizer"),
        pr.float_field(header, "weight-decay"),
        pr.str_field(header, "autocast"),
        dp_sample_clip=clip or None,
        dp_sample_noise=noise,
        dp_sample_seeded=bool(pr.int_field(header, "dp-sample-seeded")),
    )


def partition_id(context: Context) -> int:
    """This node's client id: ``node_config["partition-id"]`` (an int >= 0).

    Raises:
        ValueError: the node has no valid ``partition-id`` (start it with
            ``--node-config "partition-id=<i>"``; the simulation engine sets it).
    """
    v = context.node_config.get("partition-id")
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"node_config['partition-id'] must be an int >= 0, got {v!r}")
    return v


def client_app(
    make_strategy: Callable[[Context], Strategy],
    load_data: Callable[[Context], ClientData],
    wrap: Callable[[Context, int, ClientEndpoint], ClientEndpoint] | None = None,
    load_eval_data: Callable[[Context], ClientData] | None = None,
    mods: Sequence[Callable] | None = None,
    cache_nodes: int = DEFAULT_CACHE_NODES,
    dp_noise_seed: int | None = None,
) -> ClientApp:
    """A Flower ClientApp running fedkernels' client side.

    Args:
        make_strategy: builds the same strategy (same constructor arguments, e.g. FedALC's
            ``client_secret``) as the server's; a node whose strategy options or fedkernels
            version differ is refused by the server and refuses the server's messages.
        load_data: this node's local training data, and only this node's (it runs on the node,
            once per cached node); ``node_config["partition-id"]`` is its client id.
        wrap: optional ``(context, client_id, endpoint) -> endpoint``, as the in-process Server's
            ``client_wrapper`` (e.g. a :class:`fedkernels.fl.faults.FaultInjector` for drills).
        load_eval_data: this node's held-out data, for federated evaluation (an ``evaluate``
            message to a client app without it gets an error reply: the client is left out).
        mods: Flower ClientApp mods (``ClientApp(mods=...)``), outermost first.
        cache_nodes: how many nodes' data and strategies one process keeps (least recently used
            out first).
        dp_noise_seed: private rounds (:mod:`.private_client`) with distributed DP: None draws each
            client's noise share from OS randomness (the private choice); a seed makes it
            reproducible for experiments and tests (anyone who knows it can subtract the noise).

    Example::

        app = client_app(lambda ctx: FedAvg(hidden=(256,)), lambda ctx: my_partition(ctx.node_config))
    """
    app = ClientApp(mods=list(mods) if mods else None)
    # Names this client app in the cache: copies Flower unpickles from it keep the name, another app does not.
    app_token = uuid.uuid4().hex

    def node(context: Context) -> _Node:
        def make() -> _Node:
            strategy = make_strategy(context)
            return _Node(strategy, pr.run_identity(strategy))

        return _CACHE.get((app_token, context.run_id, context.node_id), make, cache_nodes)

    def data(context: Context, held_out: bool = False) -> ClientData:
        n = node(context)
        if held_out not in n.data:
            if held_out and load_eval_data is None:
                raise RuntimeError("this client app has no held-out data (client_app(load_eval_data=...))")
            n.data[held_out] = (load_eval_data if held_out else load_data)(context)  # type: ignore[misc]
        return n.data[held_out]

    def local(context: Context, header: ConfigRecord) -> tuple[Strategy, ClientEndpoint]:
        """This node's strategy (initialised as the server's) and its endpoint for the run in
        ``header``, after checking the server's run identity equals this node's."""
        n = node(context)
        if header.get("identity") != pr.identity_digest(n.identity):
            raise pl.PayloadError(
                "the server's run identity differs from this node's (fedkernels version or strategy options)"
            )
        run_key = repr(tuple(header.get(f) for f in _HEADER_RUN_FIELDS))
        if n.endpoint is None or n.run_key != run_key:  # initialised as the server's, so client_update can run
            n.strategy.init_state(
                pr.int_field(header, "num-features"),
                pr.int_field(header, "num-classes"),
                derive_seed(pr.int_field(header, "run-seed"), "init"),
            )
            train = train_config(header)
            endpoint: ClientEndpoint = LocalClient(n.strategy, data(context), train, node_device(context))
            if wrap is not None:
                endpoint = wrap(context, partition_id(context), endpoint)
            n.endpoint, n.run_key = endpoint, run_key
        assert n.endpoint is not None
        return n.strategy, n.endpoint

    def reply(message: Message, context: Context, raw: bytes | None, **fields: int | str) -> Message:
        """The reply: this node's client id and ``fields``, and ``raw`` (payload bytes) as an ArrayRecord."""
        records: dict = {pr.KEY: ConfigRecord({"client-id": partition_id(context), **fields})}
        if raw:
            records[pr.PAYLOAD] = bytes_to_record(raw)
            tag = pl.read_metadata(raw).get(ROUND_TAG)
            if tag is not None:  # the arrays carry no metadata: the upload's round tag rides in the header
                records[pr.KEY][pr.ROUND_TAG_FIELD] = tag
        return Message(RecordDict(records), reply_to=message)

    def header(message: Message) -> ConfigRecord:
        rec = message.content.config_records.get(pr.KEY)
        if rec is None:
            raise pl.PayloadError(f"message carries no {pr.KEY!r} record")
        return rec

    def download(message: Message) -> bytes:
        return record_to_bytes(message.content.get(pr.PAYLOAD))

    @app.query("fedkernels_identify")
    def identify(message: Message, context: Context) -> Message:
        """Which client this node is, its fedkernels version and run identity: no data is loaded."""
        n = node(context)
        return reply(message, context, None, identity=n.identity, version=pr.fedkernels_version())

    @app.query("fedkernels_setup")
    def setup(message: Message, context: Context) -> Message:
        strategy, _ = local(context, header(message))
        report = strategy.setup_report(data(context))
        return reply(message, context, None if report is None else pl.encode(report))

    @app.query("fedkernels_request")
    def request(message: Message, context: Context) -> Message:
        h = header(message)
        raw = local(context, h)[1].request(pr.int_field(h, "round"), pr.int_field(h, "seed"))
        return reply(message, context, raw)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        h = header(message)
        _, endpoint = local(context, h)
        raw = endpoint.update(download(message), pr.int_field(h, "round"), pr.int_field(h, "seed"))
        return reply(message, context, raw, **{"num-examples": len(data(context))})

    @app.query("fedkernels_private")
    def private(message: Message, context: Context) -> Message:
        """A private round's message (SecAgg+ and DP: :mod:`.private_client`, the privacy extra)."""
        from .private_client import answer_private

        h = header(message)
        strategy, _ = local(context, h)
        cid, train = partition_id(context), train_config(h)
        held_out = functools.partial(data, context, held_out=True) if load_eval_data is not None else None
        raw = answer_private(
            h, download(message), context, cid, strategy, data(context), train, dp_noise_seed, held_out
        )
        return reply(message, context, raw)

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        h = header(message)
        strategy, _ = local(context, h)
        ks = tuple(pr.int_list_field(h, "ks"))
        report = ev.client_evaluation(
            strategy, download(message), data(context, held_out=True), ks, node_device(context)
        )
        return reply(message, context, report)

    return app


def node_device(context: Context) -> torch.device:
    """Where this node trains: its ``node_config["device"]`` (``flower-supernode --node-config
    'device="cuda:1"'``), else the run's ``run_config["device"]``, else ``cpu``; refused clearly
    (:class:`~fedkernels.fl.device.DeviceUnavailable`) when that GPU is not there."""
    spec = context.node_config.get("device") or context.run_config.get("device") or "cpu"
    return resolve_device(str(spec))
