"""Private rounds over Flower: secure aggregation (SecAgg+) and differential privacy for every
strategy that :class:`fedkernels.fl.privacy.PrivateServer` runs in-process, through the SuperLink.

:class:`PrivateFlowerStrategy` is :class:`~.server.FlowerStrategy` whose training rounds are
:func:`fedkernels.fl.privacy.server.private_round`, the same function the in-process
``PrivateServer`` runs, over a transport of Flower messages: every message of the round (the
download, each SecAgg+ stage) is a :data:`~.protocol.PRIVATE` query whose
header names its ``kind`` and whose payload is the message's tensors as an ArrayRecord
(:mod:`.records`); the SuperNode answers it with ``PrivateClient.handle`` (:mod:`.private_client`).
So selection, seeds, sessions, checks, failure handling and byte counts are the in-process round's,
and a Flower run ends bit-identical to the in-process private run with the same seed (and the same
noise seeds), within the stated fixed-point error of the plain run.

Dropouts are real: before each exchange the SuperLink's online nodes are read, a client whose node
has left fails at once ("gone (node left)"), one that does not answer fails at the deadline, and
SecAgg+ recovers the sum of the clients that uploaded their masked input while each keeps
``threshold`` answering neighbours (beyond, the round is refused with the reason in
``history[r].skipped``; the state is then unchanged). Under secure aggregation a federated
evaluation is summed by SecAgg+ too (:meth:`PrivateFlowerStrategy.aggregate_evaluate`).

Requires the extras ``fedkernels[flower]`` and ``fedkernels[privacy]``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord
from flwr.serverapp import Grid

from ...fl import payload as pl
from ...fl.evaluation import MAX_EXAMPLES
from ...fl.privacy import dp
from ...fl.privacy.accounting import RunAccountant, make_accountant
from ...fl.privacy.client import COUNT, NUM_EXAMPLES
from ...fl.privacy.mechanism import published_record
from ...fl.privacy.server import (
    PrivacyConfig,
    calibrated_sigma,
    check_private,
    evaluate_privately,
    privacy_entries,
    private_round,
    unrunnable_chance,
)
from ...fl.privacy_settings import SETTINGS, privacy_settings
from ...fl.round import Answer, ClientFailed, client_seed
from ...fl.server import RunConfig
from ...fl.strategy import Strategy
from . import protocol as pr
from .app import REMOVED_PRIVACY_KEYS, flower_spelling, run_config_settings
from .nodes import GONE
from .records import ArrayCache, payload_to_record
from .server import FlowerStrategy

EMPTY = pl.encode({})  # a count message carries no tensors
# the reply to a count message: one client's example count (DP-SGD's accounting asks for it)
COUNT_SPEC = pl.PayloadSpec({NUM_EXAMPLES: pl.TensorSpec(torch.int64, (1,), min_value=0, max_value=MAX_EXAMPLES)})

AfterExchange = Callable[[str, int], None]


class PrivateFlowerStrategy(FlowerStrategy):
    """A fedkernels strategy served over Flower with private rounds.

    Args:
        strategy, num_features, num_classes, num_clients, config: as for :class:`FlowerStrategy`.
        privacy: what to protect and how (:class:`fedkernels.fl.privacy.PrivacyConfig`).
        after_exchange: optional ``(kind, round)`` called after each exchange of a private round
            (e.g. a drill that stops a node between two SecAgg+ stages).
        **flower: the other :class:`FlowerStrategy` arguments (``federated_evaluation``,
            ``startup_grace``, ``partition_keys``, ``max_in_flight``).

    ``history[r].privacy`` holds what the in-process ``PrivateServer`` records: epsilon, noise
    multiplier, survivors, ``round_rows``, SecAgg+ bytes.
    """

    def __init__(
        self,
        strategy: Strategy,
        num_features: int,
        num_classes: int,
        num_clients: int,
        config: RunConfig,
        privacy: PrivacyConfig,
        after_exchange: AfterExchange | None = None,
        **flower: Any,
    ) -> None:
        self.form = check_private(strategy, privacy, min(config.clients_per_round, num_clients))
        self.privacy = privacy
        self._counts: dict[int, tuple[int, int]] = {}  # client -> (the node that reported it, its count)
        super().__init__(strategy, num_features, num_classes, num_clients, config, **flower)
        self.state = {**privacy_entries(privacy), **self.form.with_initial_entries(self.state)}  # before a checkpoint
        self.q = config.clients_per_round / num_clients
        self.sigma = calibrated_sigma(privacy, config, num_clients)
        self.unrunnable = unrunnable_chance(privacy, config, num_clients)
        self.noise_generator = dp.noise_generator(privacy.noise_seed)
        self.after_exchange = after_exchange

    @property
    def round(self) -> int:
        """The round being run (rounds done so far)."""
        return len(self.history)

    def summary(self) -> None:
        super().summary()
        print(f"  private rounds: secagg={self.privacy.secagg}, dp={self.privacy.dp}")

    # ---- one round ---------------------------------------------------------------------------------
    def train_round(self, grid: Grid, server_round: int) -> MetricRecord | None:
        """One private round (:func:`~fedkernels.fl.privacy.server.private_round`) over Flower messages."""
        r = server_round - 1
        self._grid = grid
        if self._refreshed != r:
            self._refresh(grid, r)
        rec = private_round(self, functools.partial(self.exchange_private, grid))
        if self.accountant is not None and self.accountant.dp_sgd is not None:
            self.example_counts([c for c in rec.contributed if c not in self._counts])  # their batch rates
        self.record(rec)
        shown = published_record(rec)  # a secret sample's ids and counts stay out of the run's metrics
        metrics: dict[str, int | float | list[int] | list[float]] = {
            "clients-ok": len(shown.clients) - len(shown.failed),
            "clients-failed": len(shown.failed),
            "bytes-up": shown.bytes_up,
            "bytes-down": shown.bytes_down,
            "skipped": int(bool(shown.skipped)),
        }
        metrics.update({k: v for k, v in shown.privacy.items() if v == v and abs(v) != float("inf")})
        return MetricRecord(metrics)

    def new_accountant(self) -> RunAccountant | None:
        """Client-level (the privacy config's DP) and sample-level (DP-SGD) accounting."""
        return make_accountant(self.config.train, self.privacy, self.config.sample_delta, self.examples_of)

    def examples_of(self, client: int) -> int | None:
        """``client``'s example count: the one it answered a count message with, else reported before."""
        return self._counts[client][1] if client in self._counts else self.examples.get(client)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        raise NotImplementedError("a private round is several exchanges: run it with start() (train_round)")

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        raise NotImplementedError("a private round is several exchanges: run it with start() (train_round)")

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Plain federated evaluation (reports in the clear) without secure aggregation; under it,
        nothing here: :meth:`aggregate_evaluate` runs the evaluation as SecAgg+ exchanges."""
        if not self.privacy.secagg:
            return super().configure_evaluate(server_round, arrays, config, grid)
        self._outbox = {}
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Under secure aggregation, the federated evaluation summed by an ``evl`` SecAgg+ session
        (:func:`~fedkernels.fl.privacy.server.evaluate_privately`): the weighted means of the reports,
        never one client's report or held-out count; else the plain aggregation."""
        if not self.privacy.secagg:
            return super().aggregate_evaluate(server_round, replies)
        if not self.federated_evaluation or server_round % self.config.eval_every != 0 or self._grid is None:
            return None
        grid = self._grid
        metrics, _ = evaluate_privately(
            self, functools.partial(self.exchange_private, grid), self.dims[1], None, None, server_round - 1
        )
        if self.history:
            self.history[-1].metrics.update({f"fed-{k}": v for k, v in metrics.items()})
        return MetricRecord(dict(metrics)) if metrics else None

    def example_counts(self, clients: list[int]) -> dict[int, int | BaseException]:
        """The clients' example counts, for DP-SGD's sample-level accounting only (each client's batch
        rate is batch / its count; weights never need them: clients weigh themselves): asked with a
        ``count`` message the first time a client is chosen and again when another node serves it, else
        remembered."""
        node_of = self.nodes.node_of
        need = [c for c in clients if c not in self._counts or node_of.get(c) not in (None, self._counts[c][0])]
        out: dict[int, int | BaseException] = {}
        if need and self._grid is not None:
            answers = self.exchange_private(
                self._grid, COUNT, self.round, dict.fromkeys(need, EMPTY), COUNT_SPEC.byte_limit()
            )
            for c in need:
                ans = answers.get(c)
                if isinstance(ans, BaseException) or not ans:
                    out[c] = ans if isinstance(ans, BaseException) else ClientFailed("sent nothing")
                    continue
                try:
                    n = int(pl.decode(ans, COUNT_SPEC)[NUM_EXAMPLES][0])
                except pl.PayloadError as e:
                    out[c] = e
                    continue
                self._counts[c] = (self.nodes.node_of[c], n)
        for c in clients:
            if c not in out:
                out[c] = self._counts[c][1] if c in self._counts else ClientFailed(self.nodes.failure(c))
        return out

    # ---- the transport -------------------------------------------------------------------------------
    def exchange_private(
        self, grid: Grid, kind: str, round: int, messages: Mapping[int, bytes], reply_limit: int
    ) -> dict[int, Answer]:
        """Send each client its message of ``kind`` as a :data:`~.protocol.PRIVATE` query; each
        client's reply bytes (bounded by ``reply_limit`` before a tensor is built) or its failure."""
        online = set(grid.get_node_ids())  # a node that left since the round began drops out now
        out: dict[int, Answer] = {}
        cache, decoded = ArrayCache(), {}
        send: dict[int, Message] = {}
        for c, raw in messages.items():
            node = self.nodes.node_of.get(c)
            if node is None or node not in online:
                out[c] = ClientFailed(self.nodes.failure(c) if node is None else GONE)
                continue
            if id(raw) not in decoded:  # one message for many clients (a session's parameters): one record
                decoded[id(raw)] = payload_to_record(pl.decode(raw), cache)
            head = self._header(round, c, client_seed(self.config.seed, round, c), kind=kind)
            send[c] = self._message(c, pr.PRIVATE, str(round + 1), head, decoded[id(raw)])
        self._outbox = send
        got = self._replies(self._send(grid, send.values()))
        for c in send:
            out[c] = self._payload(c, got[c], lambda: reply_limit)[0]
        if self.after_exchange is not None:
            self.after_exchange(kind, round)
        return out


def privacy_config_from(context: Context) -> PrivacyConfig | None:
    """A :class:`PrivacyConfig` from Flower's ``run_config`` (None when nothing is protected), through
    the validator the CLI uses (:func:`fedkernels.fl.privacy_settings.privacy_settings`). Keys (each
    optional): ``secagg`` (bool), ``secagg-corrupt-fraction`` and ``secagg-dropout-fraction`` (the
    threat model), ``secagg-dropouts`` (-1: from the threat model), ``secagg-bits``, ``secagg-bound``,
    ``secagg-degree`` (0: from the threat model), ``secagg-weight-cap``, ``l1diff-segments``,
    ``dp-clip`` (0: no client-level DP), ``dp-noise`` (the noise multiplier; 0: unset) or
    ``target-epsilon`` (0: unset), ``dp-delta``, as the CLI's ``--secagg``, ``--dp-clip``, ...
    (docs/api/privacy.md). Flower declares a default for every key, so exactly 0 (-1 for the
    dropouts) means unset; any other value, NaN and negatives included, is checked as the CLI checks
    it. With secure aggregation and ``clients-per-round``, settings no SecAgg+ graph makes secure and
    correct for that many clients are refused here, before any round.

    Raises:
        ValueError: an invalid value or combination (the message names the key).
    """
    removed = [k for k in REMOVED_PRIVACY_KEYS if k in context.run_config]
    if removed:
        raise ValueError(
            f"run config sets {removed}: server-side embedding DP was removed (it noised only the rows some "
            "chosen client touched, so it was no DP mechanism); client-level DP (dp-clip) covers every row"
        )
    c = context.run_config
    per_round = None
    if "clients-per-round" in c:
        per_round = int(c["clients-per-round"])
        if "num-clients" in c:
            per_round = min(per_round, int(c["num-clients"]))
    names = [n for n in SETTINGS if not n.startswith("dp_sample")]  # DP-SGD's are local training's (app.py)
    seed = int(c.get("seed", 0))
    return privacy_settings(run_config_settings(context, names), flower_spelling, per_round, seed=seed).privacy
