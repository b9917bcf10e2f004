"""Flower (flwr >= 1.20 Message API) for every fedkernels strategy, through one generic adapter.

:class:`FlowerStrategy` is a ``flwr.serverapp.strategy.Strategy`` wrapping any
:class:`fedkernels.fl.Strategy` (FedAvg, FedMLH, FedSS, partial exchange, the l1-difference
update, ...). The bytes on the wire are the same safetensors payloads as in the in-process
:class:`fedkernels.fl.Server`, checked by the same specs, and client selection, seeds and
aggregation order are the same, so a Flower run ends bit-identical to the in-process run with the
same seed. :func:`client_app` runs the strategy's client side (fedkernels' local training and
kernels) on a SuperNode; :func:`server_app` runs the strategy on the SuperLink.

A round (``server_round`` = fedkernels round + 1):
  1. (once) a ``query.fedkernels_hello`` to every node: which client (``partition-id``) it is and
     how many examples it holds;
  2. (strategies with a ``client_request``) a ``query.fedkernels_request`` to the chosen clients;
  3. ``train`` messages with each chosen client's download; the replies' uploads are decoded
     against ``upload_spec`` and aggregated in ascending client id. A client that errs, does not
     answer before the timeout, sends nothing or sends a rejected payload is recorded in
     ``history[-1].failed``; the state changes only from checked uploads.

Requires the optional extra ``fedkernels[flower]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy as _FlowerStrategy

from ..fl import payload as pl
from ..fl.checkpoint import save_checkpoint
from ..fl.client import ClientEndpoint, LocalClient
from ..fl.seeding import derive_seed
from ..fl.server import RunConfig, aggregate_round, bounded, client_seed, record_to_json, run_identity, select_clients
from ..fl.strategy import State, Strategy
from ..fl.types import ClientData, ClientResult, RoundRecord, TrainConfig

KEY = "fedkernels"  # the ConfigRecord every fedkernels message carries
HELLO, REQUEST = f"{MessageType.QUERY}.fedkernels_hello", f"{MessageType.QUERY}.fedkernels_request"


class FlowerStrategy(_FlowerStrategy):
    """A fedkernels strategy served over Flower.

    Args:
        strategy: the fedkernels algorithm (its ``setup`` must not need client data: Flower's server
            never sees it).
        num_features, num_classes: the model's input width and label count.
        num_clients: how many clients (SuperNodes with ``partition-id`` 0..num_clients-1) take part.
        config: rounds, clients per round, local training, seed, ``client_timeout`` (seconds to wait
            for replies), ``max_upload_bytes`` and ``checkpoint`` (written atomically each round, in
            the in-process Server's format) as for :class:`fedkernels.fl.Server`.

    Attributes:
        state: the global fedkernels State (the source of truth; Flower's ArrayRecord is a copy).
        history: one :class:`RoundRecord` per round, as in the in-process Server.
    """

    def __init__(
        self, strategy: Strategy, num_features: int, num_classes: int, num_clients: int, config: RunConfig
    ) -> None:
        if type(strategy).setup is not Strategy.setup:
            raise NotImplementedError(
                f"strategy {strategy.name} needs client data in setup(), which a Flower server does not have"
            )
        if not 1 <= config.clients_per_round <= num_clients:
            raise ValueError(f"clients_per_round must be in [1, {num_clients}], got {config.clients_per_round}")
        self.strategy, self.config, self.num_clients = strategy, config, num_clients
        self.dims = (num_features, num_classes)
        self.state: State = strategy.init_state(num_features, num_classes, derive_seed(config.seed, "init"))
        self.history: list[RoundRecord] = []
        self.nodes: dict[int, tuple[int, int]] = {}  # client id -> (node id, num examples)
        self._round: _RoundInProgress | None = None

    # ---- Flower's Strategy API -------------------------------------------------------------
    def summary(self) -> None:
        print(
            f"fedkernels {self.strategy.name} over Flower: {self.num_clients} clients, "
            f"{self.config.clients_per_round} per round, seed {self.config.seed}"
        )

    def initial_arrays(self) -> ArrayRecord:
        """The initial state as Flower's ArrayRecord (for ``start``)."""
        return ArrayRecord(self.state)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        r = server_round - 1
        if not self.nodes:
            self._discover(grid)
        rnd = _RoundInProgress(r, select_clients(self.config.seed, r, self.num_clients, self.config.clients_per_round))
        self._round = rnd
        requests = self._collect_requests(grid, rnd)
        messages = []
        for c in rnd.chosen:
            if c in rnd.failed:
                continue
            seed = client_seed(self.config.seed, r, c)
            try:
                down = self.strategy.client_payload(self.state, c, requests.get(c), r, seed)
            except Exception as e:  # a request that passed its spec but the strategy still refuses
                rnd.failed[c] = f"crashed: {type(e).__name__}: {e}"
                continue
            raw = pl.encode(down)
            rnd.sent[c] = (down, len(raw))
            messages.append(
                Message(
                    RecordDict({KEY: self._header(r, c, seed, payload=raw)}),
                    message_type=MessageType.TRAIN,
                    dst_node_id=self.nodes[c][0],
                    group_id=str(server_round),
                )
            )
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        rnd, self._round = self._round, None
        assert rnd is not None and rnd.round == server_round - 1, "configure_train first"
        t0 = time.perf_counter()
        answers = self._by_client(replies, set(rnd.sent))
        results: list[ClientResult] = []
        for c in sorted(rnd.sent):
            down, _ = rnd.sent[c]
            try:
                raw = _bytes_of(answers.get(c), "upload")
                checked = pl.decode(
                    raw, bounded(self.strategy.upload_spec(self.state, down), self.config.max_upload_bytes)
                )
                self.strategy.check_upload(self.state, down, checked)
            except _Failure as e:
                rnd.failed[c] = str(e)
                continue
            except pl.PayloadError as e:
                rnd.failed[c] = f"rejected: {e}"
                continue
            rnd.bytes_up[c] = rnd.bytes_up.get(c, 0) + len(raw)
            results.append(ClientResult(c, checked, self.nodes[c][1], rnd.bytes_up[c]))
        self.state, skipped = aggregate_round(self.strategy, self.state, results, rnd.round)
        ok = {x.client_id for x in results}
        rec = RoundRecord(
            rnd.round,
            rnd.chosen,
            sorted(rnd.failed.items()),
            sum(n for c, (_, n) in rnd.sent.items() if c in ok),
            sum(x.bytes_up for x in results),
            skipped=skipped,
        )
        rec.seconds = time.perf_counter() - rnd.t0
        self.history.append(rec)
        if self.config.checkpoint is not None:
            self.save_checkpoint(self.config.checkpoint)
        metrics = MetricRecord(
            {
                "clients-ok": len(results),
                "clients-failed": len(rec.failed),
                "bytes-up": rec.bytes_up,
                "bytes-down": rec.bytes_down,
                "aggregate-seconds": time.perf_counter() - t0,
            }
        )
        return ArrayRecord(self.state), metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # evaluation is centralised: see ``evaluate_fn`` of ``start``

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def save_checkpoint(self, path: str | Path) -> None:
        """The in-process Server's checkpoint format: ``Server(...).load_checkpoint`` can resume it."""
        meta = {
            "round": len(self.history),
            "history": [record_to_json(h) for h in self.history],
            **run_identity(self.strategy, self.config, self.num_clients),
        }
        save_checkpoint(path, self.state, meta)

    # ---- the fedkernels protocol -----------------------------------------------------------
    def _header(self, r: int, c: int, seed: int, **extra: bytes) -> ConfigRecord:
        t = self.config.train
        return ConfigRecord(
            {
                "round": r,
                "client-id": c,
                "seed": seed,
                "run-seed": self.config.seed,
                "num-features": self.dims[0],
                "num-classes": self.dims[1],
                "epochs": t.epochs,
                "batch-size": t.batch_size,
                "lr": float(t.lr),
                "optimizer": t.optimizer,
                "weight-decay": float(t.weight_decay),
                **extra,
            }
        )

    def _discover(self, grid: Grid) -> None:
        """Learn which node is which client: wait (up to the timeout) for all of them, then ask."""
        deadline = time.monotonic() + (self.config.client_timeout or 3600.0)
        while len(list(grid.get_node_ids())) < self.num_clients and time.monotonic() < deadline:
            time.sleep(0.5)
        msgs = [
            Message(RecordDict({KEY: ConfigRecord({})}), message_type=HELLO, dst_node_id=n, group_id="hello")
            for n in grid.get_node_ids()
        ]
        for reply in grid.send_and_receive(msgs, timeout=self.config.client_timeout):
            if reply.has_error() or KEY not in reply.content.config_records:
                continue
            info = reply.content.config_records[KEY]
            cid, n = info.get("client-id"), info.get("num-examples")
            if type(cid) is int and type(n) is int and 0 <= cid < self.num_clients and n > 0:
                if cid in self.nodes:
                    raise RuntimeError(f"two nodes claim partition-id {cid}")
                self.nodes[cid] = (reply.metadata.src_node_id, n)

    def _collect_requests(self, grid: Grid, rnd: _RoundInProgress) -> dict[int, pl.Payload | None]:
        """Step 2: the chosen clients' checked requests (clients without a node fail here)."""
        for c in rnd.chosen:
            if c not in self.nodes:
                rnd.failed[c] = "not connected"
        live = [c for c in rnd.chosen if c not in rnd.failed]
        spec = self.strategy.request_spec(self.state)
        if spec is None:
            return {}
        msgs = [
            Message(
                RecordDict({KEY: self._header(rnd.round, c, client_seed(self.config.seed, rnd.round, c))}),
                message_type=REQUEST,
                dst_node_id=self.nodes[c][0],
                group_id=f"request-{rnd.round}",
            )
            for c in live
        ]
        answers = self._by_client(grid.send_and_receive(msgs, timeout=self.config.client_timeout), set(live))
        out: dict[int, pl.Payload | None] = {}
        for c in live:
            try:
                raw = _bytes_of(answers.get(c), "request", allow_empty=True)
                # No request is allowed, as in-process: the strategy's client_payload decides.
                out[c] = pl.decode(raw, bounded(spec, self.config.max_upload_bytes)) if raw else None
                rnd.bytes_up[c] = len(raw)
            except _Failure as e:
                rnd.failed[c] = str(e)
            except pl.PayloadError as e:
                rnd.failed[c] = f"rejected: {e}"
        return out

    def _by_client(self, replies: Iterable[Message], expected: set[int]) -> dict[int, Message]:
        """Replies keyed by the client id of the node that sent them (strangers are ignored)."""
        client_of = {node: c for c, (node, _) in self.nodes.items()}
        out = {}
        for m in replies:
            c = client_of.get(m.metadata.src_node_id)
            if c in expected and c not in out:
                out[c] = m
        return out


class _Failure(Exception):
    """A client's reply that carries no usable bytes; the message is the recorded reason."""


def _bytes_of(reply: Message | None, field: str, allow_empty: bool = False) -> bytes:
    """The bytes in ``field`` of a client's reply, or :class:`_Failure` with the reason to record."""
    if reply is None:
        raise _Failure("timed out (no reply)")
    if reply.has_error():
        raise _Failure(f"crashed: {reply.error.reason}")
    rec = reply.content.config_records.get(KEY)
    value = rec.get(field) if rec is not None else None
    if not isinstance(value, bytes) or (not value and not allow_empty):
        raise _Failure(f"sent no {field}")
    return value


class _RoundInProgress:
    """What configure_train learned, kept for aggregate_train."""

    def __init__(self, round: int, chosen: list[int]) -> None:
        self.round, self.chosen, self.t0 = round, chosen, time.perf_counter()
        self.failed: dict[int, str] = {}
        self.sent: dict[int, tuple[pl.Payload, int]] = {}  # client -> (download, its bytes)
        self.bytes_up: dict[int, int] = {}


def _int_field(rec: ConfigRecord, key: str) -> int:
    """``rec[key]``, which the server wrote as an int (PayloadError naming the field if it is not)."""
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise pl.PayloadError(f"message field {key!r} must be an int, got {type(v).__name__}")
    return v


def _float_field(rec: ConfigRecord, key: str) -> float:
    """``rec[key]``, which the server wrote as a float (an int is accepted)."""
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise pl.PayloadError(f"message field {key!r} must be a float, got {type(v).__name__}")
    return float(v)


def _str_field(rec: ConfigRecord, key: str) -> str:
    v = rec[key]
    if not isinstance(v, str):
        raise pl.PayloadError(f"message field {key!r} must be a str, got {type(v).__name__}")
    return v


def _bytes_field(rec: ConfigRecord, key: str) -> bytes:
    v = rec[key]
    if not isinstance(v, bytes):
        raise pl.PayloadError(f"message field {key!r} must be bytes, got {type(v).__name__}")
    return v


def client_app(
    make_strategy: Callable[[Context], Strategy],
    load_data: Callable[[Context], ClientData],
    wrap: Callable[[Context, int, ClientEndpoint], ClientEndpoint] | None = None,
) -> ClientApp:
    """A Flower ClientApp running fedkernels' client side.

    Args:
        make_strategy: builds the same strategy (same constructor arguments) as the server's.
        load_data: this node's local data; its ``node_config["partition-id"]`` is its client id.
        wrap: optional ``(context, client_id, endpoint) -> endpoint``, as the in-process Server's
            ``client_wrapper`` (e.g. a :class:`fedkernels.fl.faults.FaultInjector` for drills).

    Example::

        app = client_app(lambda ctx: FedAvg(hidden=(256,)), lambda ctx: my_partition(ctx.node_config))
    """
    app = ClientApp()
    # per node (a long-lived app process may serve several): its data, and its endpoint with the run it is for
    data_cache: dict[int, ClientData] = {}
    client_cache: dict[int, tuple[str, ClientEndpoint]] = {}

    def _data(context: Context) -> ClientData:
        if context.node_id not in data_cache:
            data_cache[context.node_id] = load_data(context)
        return data_cache[context.node_id]

    def local(context: Context, header: ConfigRecord) -> ClientEndpoint:
        key = repr(
            (
                header["run-seed"],
                header["num-features"],
                header["num-classes"],
                header["epochs"],
                header["batch-size"],
                header["lr"],
                header["optimizer"],
                header["weight-decay"],
            )
        )
        cached = client_cache.get(context.node_id)
        if cached is None or cached[0] != key:  # the strategy is initialised as the server's, so client_update can run
            strategy = make_strategy(context)
            strategy.init_state(
                _int_field(header, "num-features"),
                _int_field(header, "num-classes"),
                derive_seed(_int_field(header, "run-seed"), "init"),
            )
            train = TrainConfig(
                _int_field(header, "epochs"),
                _int_field(header, "batch-size"),
                _float_field(header, "lr"),
                _str_field(header, "optimizer"),
                _float_field(header, "weight-decay"),
            )
            client: ClientEndpoint = LocalClient(strategy, _data(context), train)
            if wrap is not None:
                client = wrap(context, int(context.node_config["partition-id"]), client)
            cached = client_cache[context.node_id] = (key, client)
        return cached[1]

    @app.query("fedkernels_hello")
    def hello(message: Message, context: Context) -> Message:
        info = ConfigRecord(
            {"client-id": int(context.node_config["partition-id"]), "num-examples": len(_data(context))}
        )
        return Message(RecordDict({KEY: info}), reply_to=message)

    @app.query("fedkernels_request")
    def request(message: Message, context: Context) -> Message:
        h = message.content.config_records[KEY]
        raw = local(context, h).request(_int_field(h, "round"), _int_field(h, "seed"))
        return Message(RecordDict({KEY: ConfigRecord({"request": raw or b""})}), reply_to=message)

    @app.train()
    def train(message: Message, context: Context) -> Message:
        h = message.content.config_records[KEY]
        raw = local(context, h).update(_bytes_field(h, "payload"), _int_field(h, "round"), _int_field(h, "seed"))
        return Message(RecordDict({KEY: ConfigRecord({"upload": raw or b""})}), reply_to=message)

    return app


def server_app(make_strategy: Callable[[Context], FlowerStrategy]) -> ServerApp:
    """A Flower ServerApp running ``make_strategy(context)`` for ``config.rounds`` rounds.

    Example::

        app = server_app(lambda ctx: FlowerStrategy(FedAvg(hidden=(256,)), F, p, num_clients=10,
                                                    config=RunConfig(rounds=20, clients_per_round=4)))
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        fk = make_strategy(context)
        fk.start(grid, fk.initial_arrays(), num_rounds=fk.config.rounds, timeout=fk.config.client_timeout or 3600.0)

    return app
