"""Flower (flwr >= 1.20 Message API) for every fedkernels strategy, through one generic adapter.

:class:`FlowerStrategy` is a ``flwr.serverapp.strategy.Strategy`` wrapping any
:class:`fedkernels.fl.Strategy`. It is a transport of the round protocol
(:mod:`fedkernels.fl.round`) that the in-process :class:`fedkernels.fl.Server` drives too: the
selection, seeds, checks, failure reasons and aggregation order are that module's, and the bytes on
the wire are the same safetensors payloads, so a Flower run ends bit-identical to the in-process run
with the same seed. :func:`client_app` runs the strategy's client side (fedkernels' local training
and kernels) on a SuperNode; :func:`server_app` runs the strategy on the SuperLink.

Messages (``server_round`` = fedkernels round + 1):
  1. (once) ``query.fedkernels_hello`` to every node: which client (``partition-id``) it is and how
     many examples it holds;
  2. (once, strategies with a setup exchange, e.g. FedALC's private label sets)
     ``query.fedkernels_setup`` to every client; the checked reports go to ``setup_from_reports``;
  3. (strategies with a ``client_request``) ``query.fedkernels_request`` to the chosen clients;
  4. ``train`` messages with each chosen client's download; the uploads are checked and aggregated
     by the round protocol. A client that errs, does not answer before the timeout, sends nothing or
     sends a rejected payload is recorded in ``history[-1].failed``; the state changes only from
     checked uploads;
  5. (with ``federated_evaluation``) ``evaluate`` messages with the global state to every client,
     which ranks its own held-out data (:mod:`fedkernels.fl.evaluation`); the example-weighted
     P@k/nDCG@k land in ``history[-1].metrics`` as ``fed-P@k``/``fed-nDCG@k``.

Requires the optional extra ``fedkernels[flower]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy as _FlowerStrategy

from ..fl import evaluation as ev
from ..fl import payload as pl
from ..fl.checkpoint import save_checkpoint
from ..fl.client import ClientEndpoint, LocalClient
from ..fl.round import (
    Answer,
    ClientFailed,
    Round,
    has_setup_exchange,
    select_clients,
    setup_exchange,
)
from ..fl.seeding import derive_seed
from ..fl.server import RunConfig, record_to_json, run_identity
from ..fl.strategy import State, Strategy
from ..fl.types import ClientData, RoundRecord, TrainConfig

KEY = "fedkernels"  # the ConfigRecord every fedkernels message carries
HELLO, REQUEST = f"{MessageType.QUERY}.fedkernels_hello", f"{MessageType.QUERY}.fedkernels_request"
SETUP = f"{MessageType.QUERY}.fedkernels_setup"


class FlowerStrategy(_FlowerStrategy):
    """A fedkernels strategy served over Flower: the Flower transport of :mod:`fedkernels.fl.round`.

    Args:
        strategy: the fedkernels algorithm. One whose ``setup`` needs client data in the server's
            hands is refused (a Flower server never has it); a setup exchange (``setup_report``,
            e.g. FedALC) runs as Flower messages before round 1.
        num_features, num_classes: the model's input width and label count.
        num_clients: how many clients (SuperNodes with ``partition-id`` 0..num_clients-1) take part.
        config: rounds, clients per round, local training, seed, ``client_timeout`` (seconds to wait
            for replies), ``max_upload_bytes``, ``eval_every``, ``eval_k`` and ``checkpoint``
            (written atomically each round, in the in-process Server's format) as for
            :class:`fedkernels.fl.Server`.
        federated_evaluation: every ``config.eval_every`` rounds, every client evaluates the global
            model on its own held-out data (the client app's ``load_eval_data``).

    Attributes:
        state: the global fedkernels State (the source of truth; Flower's ArrayRecord is a copy).
        history: one :class:`RoundRecord` per round, as in the in-process Server.
        setup_failed: clients whose setup report was left out (client -> reason).
        setup_bytes_up: the bytes of the setup reports taken (0 without a setup exchange).
    """

    def __init__(
        self,
        strategy: Strategy,
        num_features: int,
        num_classes: int,
        num_clients: int,
        config: RunConfig,
        federated_evaluation: bool = False,
    ) -> None:
        if strategy.stateful_clients:
            raise NotImplementedError(
                f"strategy {strategy.name} has stateful clients (they keep tensors between rounds), which the "
                "Flower adapter does not carry; run it in process (or, for PartialExchange, keep_unreceived=False)"
            )
        if type(strategy).setup is not Strategy.setup:
            raise NotImplementedError(
                f"strategy {strategy.name} needs client data in setup(), which a Flower server does not have "
                "(give it a setup exchange: setup_report / setup_from_reports)"
            )
        if not 1 <= config.clients_per_round <= num_clients:
            raise ValueError(f"clients_per_round must be in [1, {num_clients}], got {config.clients_per_round}")
        self.strategy, self.config, self.num_clients = strategy, config, num_clients
        self.federated_evaluation = federated_evaluation
        self.dims = (num_features, num_classes)
        self.state: State = strategy.init_state(num_features, num_classes, derive_seed(config.seed, "init"))
        self.history: list[RoundRecord] = []
        self.nodes: dict[int, tuple[int, int]] = {}  # client id -> (node id, num examples)
        self.setup_failed: dict[int, str] | None = None  # None until the setup exchange ran
        self.setup_bytes_up = 0  # the setup reports' bytes (clients to server), before round 0
        self._round: Round | None = None

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
        if self.setup_failed is None:
            self._setup(grid)
        chosen = select_clients(self.config.seed, r, self.num_clients, self.config.clients_per_round)
        rnd = Round(self.strategy, self.state, r, chosen, self.config.seed, self.config.max_upload_bytes)
        self._round = rnd
        for c in chosen:
            if c not in self.nodes:
                rnd.fail(c, ClientFailed("not connected"))
        asked = self._ask_requests(grid, rnd) if rnd.wants_requests() else {}
        seeds = rnd.seeds()
        return [
            Message(
                RecordDict({KEY: self._header(r, c, seeds[c], payload=raw)}),
                message_type=MessageType.TRAIN,
                dst_node_id=self.nodes[c][0],
                group_id=str(server_round),
            )
            for c, raw in rnd.downloads(asked).items()
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        rnd, self._round = self._round, None
        assert rnd is not None and rnd.round == server_round - 1, "configure_train first"
        t0 = time.perf_counter()
        answers = self._by_client(replies, set(rnd.seeds()))
        uploads = {c: _answer(m, "upload") for c, m in answers.items()}
        uniform = self.config.client_weighting == "uniform"  # as Server.num_examples weighs clients
        weights = {c: int(n > 0) if uniform else n for c, (_, n) in self.nodes.items()}
        self.state, rec = rnd.finish(uploads, weights)
        self.history.append(rec)
        if self.config.checkpoint is not None:
            self.save_checkpoint(self.config.checkpoint)
        metrics = MetricRecord(
            {
                "clients-ok": len(rec.clients) - len(rec.failed),
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
        """With ``federated_evaluation``, every ``eval_every`` rounds: the global state to every
        connected client, which ranks its own held-out data."""
        if not self.federated_evaluation or server_round % self.config.eval_every != 0:
            return []
        down = ev.evaluation_download(self.state)
        ks = list(ev.evaluation_ks(self.config.eval_k, self.dims[1]))
        return [
            Message(
                RecordDict({KEY: self._header(server_round - 1, c, 0, payload=down, ks=ks)}),
                message_type=MessageType.EVALUATE,
                dst_node_id=node,
                group_id=f"evaluate-{server_round}",
            )
            for c, (node, _) in sorted(self.nodes.items())
        ]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The example-weighted P@k/nDCG@k of the clients' reports (also in ``history[-1].metrics``
        as ``fed-...``; clients whose report failed are left out)."""
        if not self.federated_evaluation or server_round % self.config.eval_every != 0:
            return None
        answers = self._by_client(replies, set(self.nodes))
        reports: dict[int, Answer] = {c: _answer(answers.get(c), "report") for c in self.nodes}
        metrics, _failed, n = ev.aggregate_evaluation(reports, ev.evaluation_ks(self.config.eval_k, self.dims[1]))
        if self.history:
            self.history[-1].metrics.update({f"fed-{k}": v for k, v in metrics.items()})
            if self.config.checkpoint is not None:  # the round's record now holds its metrics
                self.save_checkpoint(self.config.checkpoint)
        return MetricRecord({**metrics, "num-examples": n})

    def save_checkpoint(self, path: str | Path) -> None:
        """The in-process Server's checkpoint format: ``Server(...).load_checkpoint`` can resume it."""
        meta = {
            "round": len(self.history),
            "history": [record_to_json(h) for h in self.history],
            **run_identity(self.strategy, self.config, self.num_clients),
        }
        save_checkpoint(path, self.state, meta)

    # ---- the fedkernels protocol -----------------------------------------------------------
    def _header(self, r: int, c: int, seed: int, **extra: bytes | list[int]) -> ConfigRecord:
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

    def _setup(self, grid: Grid) -> None:
        """The strategy's setup exchange (if any): every connected client's report, checked."""
        self.setup_failed = {}
        if not has_setup_exchange(self.strategy):
            return
        msgs = [
            Message(RecordDict({KEY: self._header(-1, c, 0)}), message_type=SETUP, dst_node_id=node, group_id="setup")
            for c, (node, _) in sorted(self.nodes.items())
        ]
        answers = self._by_client(grid.send_and_receive(msgs, timeout=self.config.client_timeout), set(self.nodes))
        reports = {c: _answer(answers.get(c), "report") for c in self.nodes}
        seed = derive_seed(self.config.seed, "setup")
        self.setup_failed, self.setup_bytes_up, self.state = setup_exchange(
            self.strategy, self.state, reports, seed, self.config.max_upload_bytes
        )
        for c in range(self.num_clients):
            if c not in self.nodes:
                self.setup_failed[c] = "not connected"

    def _ask_requests(self, grid: Grid, rnd: Round) -> dict[int, Answer]:
        """The live chosen clients' raw requests (``None``: it made none; a missing reply timed out)."""
        seeds = rnd.seeds()
        msgs = [
            Message(
                RecordDict({KEY: self._header(rnd.round, c, seed)}),
                message_type=REQUEST,
                dst_node_id=self.nodes[c][0],
                group_id=f"request-{rnd.round}",
            )
            for c, seed in seeds.items()
        ]
        answers = self._by_client(grid.send_and_receive(msgs, timeout=self.config.client_timeout), set(seeds))
        out: dict[int, Answer] = {}
        for c in seeds:
            got = _answer(answers.get(c), "request")
            out[c] = None if got == b"" else got  # an empty request is no request, as in-process
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


def _answer(reply: Message | None, field: str) -> Answer:
    """The bytes in ``field`` of a client's reply, or the :class:`ClientFailed` to record."""
    if reply is None:
        return ClientFailed("timed out (no reply)")
    if reply.has_error():
        return ClientFailed(f"crashed: {reply.error.reason}")
    rec = reply.content.config_records.get(KEY)
    value = rec.get(field) if rec is not None else None
    if not isinstance(value, bytes):
        return ClientFailed(f"sent no {field}")
    return value


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
    load_eval_data: Callable[[Context], ClientData] | None = None,
) -> ClientApp:
    """A Flower ClientApp running fedkernels' client side.

    Args:
        make_strategy: builds the same strategy (same constructor arguments, e.g. FedALC's
            ``client_secret``) as the server's.
        load_data: this node's local training data; its ``node_config["partition-id"]`` is its
            client id.
        wrap: optional ``(context, client_id, endpoint) -> endpoint``, as the in-process Server's
            ``client_wrapper`` (e.g. a :class:`fedkernels.fl.faults.FaultInjector` for drills).
        load_eval_data: this node's held-out data, for federated evaluation (an ``evaluate``
            message to a client app without it gets an error reply: the client is left out).

    Example::

        app = client_app(lambda ctx: FedAvg(hidden=(256,)), lambda ctx: my_partition(ctx.node_config))
    """
    app = ClientApp()
    # per node (a long-lived app process may serve several): its data, and its endpoint with the run it is for
    data_cache: dict[tuple[int, bool], ClientData] = {}  # (node, held-out?) -> data
    client_cache: dict[int, tuple[str, Strategy, ClientEndpoint]] = {}

    def _data(context: Context, eval_data: bool = False) -> ClientData:
        key = (context.node_id, eval_data)
        if key not in data_cache:
            load = load_data
            if eval_data:
                if load_eval_data is None:
                    raise RuntimeError("this client app has no held-out data (client_app(load_eval_data=...))")
                load = load_eval_data
            data_cache[key] = load(context)
        return data_cache[key]

    def local(context: Context, header: ConfigRecord) -> tuple[Strategy, ClientEndpoint]:
        """This node's strategy (initialised as the server's) and its endpoint for the run in ``header``."""
        names = ("run-seed", "num-features", "num-classes", "epochs", "batch-size", "lr", "optimizer", "weight-decay")
        key = repr(tuple(header[n] for n in names))
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
            cached = client_cache[context.node_id] = (key, strategy, client)
        return cached[1], cached[2]

    def reply(message: Message, **fields: bytes) -> Message:
        return Message(RecordDict({KEY: ConfigRecord(dict(fields))}), reply_to=message)

    @app.query("fedkernels_hello")
    def hello(message: Message, context: Context) -> Message:
        info = ConfigRecord(
            {"client-id": int(context.node_config["partition-id"]), "num-examples": len(_data(context))}
        )
        return Message(RecordDict({KEY: info}), reply_to=message)

    @app.query("fedkernels_setup")
    def setup(message: Message, context: Context) -> Message:
        strategy, _ = local(context, message.content.config_records[KEY])
        report = strategy.setup_report(_data(context))
        return reply(message, report=b"" if report is None else pl.encode(report))

    @app.query("fedkernels_request")
    def request(message: Message, context: Context) -> Message:
        h = message.content.config_records[KEY]
        raw = local(context, h)[1].request(_int_field(h, "round"), _int_field(h, "seed"))
        return reply(message, request=raw or b"")

    @app.train()
    def train(message: Message, context: Context) -> Message:
        h = message.content.config_records[KEY]
        raw = local(context, h)[1].update(_bytes_field(h, "payload"), _int_field(h, "round"), _int_field(h, "seed"))
        return reply(message, upload=raw or b"")

    @app.evaluate()
    def evaluate(message: Message, context: Context) -> Message:
        h = message.content.config_records[KEY]
        strategy, _ = local(context, h)
        ks_field = h["ks"]
        if not isinstance(ks_field, list) or not all(type(k) is int for k in ks_field):
            raise pl.PayloadError("message field 'ks' must be a list of ints")
        ks = tuple(int(k) for k in ks_field)
        data = _data(context, eval_data=True)
        return reply(message, report=ev.client_evaluation(strategy, _bytes_field(h, "payload"), data, ks))

    return app


def run_config_from(context: Context, **defaults: object) -> RunConfig:
    """A :class:`RunConfig` from Flower's ``run_config`` (``[tool.flwr.app.config]`` of the app's
    pyproject, overridden by ``flwr run -c``). Keys (each optional, else ``defaults`` by field
    name, else RunConfig's default): ``rounds``, ``clients-per-round``, ``seed``, ``timeout``
    (seconds; 0 waits forever), ``checkpoint`` ("" for none), ``max-upload-bytes`` (0 for no extra
    bound), ``eval-every``, ``eval-k`` (e.g. "1,3,5"), ``epochs``, ``batch-size``, ``lr``,
    ``optimizer``, ``weight-decay``."""
    c = context.run_config
    base = RunConfig(**defaults)  # type: ignore[arg-type]
    t = base.train

    def get(key: str, default: object) -> object:
        return c.get(key, default)

    timeout = float(get("timeout", base.client_timeout or 0))  # type: ignore[arg-type]
    max_up = int(get("max-upload-bytes", base.max_upload_bytes or 0))  # type: ignore[call-overload]
    ks = get("eval-k", ",".join(str(k) for k in base.eval_k))
    return RunConfig(
        rounds=int(get("rounds", base.rounds)),  # type: ignore[call-overload]
        clients_per_round=int(get("clients-per-round", base.clients_per_round)),  # type: ignore[call-overload]
        seed=int(get("seed", base.seed)),  # type: ignore[call-overload]
        client_timeout=timeout or None,
        checkpoint=str(get("checkpoint", base.checkpoint or "")) or None,
        max_upload_bytes=max_up or None,
        eval_every=int(get("eval-every", base.eval_every)),  # type: ignore[call-overload]
        eval_k=tuple(int(k) for k in str(ks).split(",") if k.strip()),
        train=TrainConfig(
            epochs=int(get("epochs", t.epochs)),  # type: ignore[call-overload]
            batch_size=int(get("batch-size", t.batch_size)),  # type: ignore[call-overload]
            lr=float(get("lr", t.lr)),  # type: ignore[arg-type]
            optimizer=str(get("optimizer", t.optimizer)),
            weight_decay=float(get("weight-decay", t.weight_decay)),  # type: ignore[arg-type]
        ),
    )


EvaluateFn = Callable[[int, Strategy, State, Context], Mapping[str, float]]


def server_app(
    make_strategy: Callable[[Context], FlowerStrategy],
    evaluate_fn: EvaluateFn | None = None,
    on_done: Callable[[Context, FlowerStrategy], None] | None = None,
) -> ServerApp:
    """A Flower ServerApp running ``make_strategy(context)`` for ``config.rounds`` rounds.

    Args:
        make_strategy: builds the FlowerStrategy (its RunConfig typically from
            :func:`run_config_from(context) <run_config_from>`, i.e. the app's ``run_config``).
        evaluate_fn: optional centralised evaluation on the server's own data,
            ``(server_round, strategy, state, context) -> {metric: value}``, run before round 1
            (``server_round`` 0) and after every ``config.eval_every`` rounds; its metrics also land
            in ``history[-1].metrics``.
        on_done: optional ``(context, flower_strategy)`` called after the last round (e.g. to write
            ``history`` somewhere).

    Example::

        app = server_app(
            lambda ctx: FlowerStrategy(FedAvg(hidden=(256,)), F, p, num_clients=10, config=run_config_from(ctx)),
            evaluate_fn=lambda rnd, strategy, state, ctx: my_test_metrics(strategy, state),
        )
    """
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        fk = make_strategy(context)

        def central(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
            if evaluate_fn is None or server_round % fk.config.eval_every != 0:
                return None
            metrics = {k: float(v) for k, v in evaluate_fn(server_round, fk.strategy, fk.state, context).items()}
            if server_round > 0 and fk.history:
                fk.history[-1].metrics.update(metrics)
            return MetricRecord(dict(metrics.items()))

        fk.start(
            grid,
            fk.initial_arrays(),
            num_rounds=fk.config.rounds,
            timeout=fk.config.client_timeout or 3600.0,
            evaluate_fn=central if evaluate_fn is not None else None,
        )
        if on_done is not None:
            on_done(context, fk)

    return app
