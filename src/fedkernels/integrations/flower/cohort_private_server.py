"""Private rounds (secure aggregation, client-level DP) with cohort nodes.

:class:`CohortPrivateFlowerStrategy` runs :func:`fedkernels.fl.privacy.server.private_round`, the
round the in-process ``PrivateServer`` and the one-client :class:`~.private_server.PrivateFlowerStrategy`
run, over cohort nodes (:mod:`.cohort_server`): each exchange of the round (the download, each SecAgg+
stage) sends one :data:`~.protocol.COHORT_PRIVATE` query per node carrying the stage's message of each
of its clients (each distinct message once), and the node answers with each client's reply as its own
record (:mod:`.cohort_private_client`). Every sampled client stays its own SecAgg+ participant (own
keys, shares, mask, weight, clip and noise stream); the server splits each reply
(:mod:`.cohort_replies`) and checks each client's reply as from a one-client node. So messages per
round scale with nodes, and selection, sessions, checks, dropout handling, epsilon and byte counts are
the one-client path's: a run ends bit-identical to the in-process private run of the same seed.

A node that leaves drops all its clients at once; SecAgg+ recovers the sum while each surviving
client keeps ``threshold`` answering neighbours, else the round is refused with the reason and the
state kept.

Trust: a node trains its clients, so it sees their updates and holds their SecAgg+ secrets. A node
that colludes with the server therefore brings all its sampled clients as colluders. Before each
round's first exchange, under secure aggregation, the clients of the ``colluding_nodes`` largest
cohorts of the round must be within the colluders the threat model allows
(``PrivacyConfig.colluders_for``: ``floor(corrupt_fraction * n)``); otherwise the round is not run
(every client fails with the reason, ``history[r].skipped`` says why, the state is kept).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, cast

from flwr.app import Context, Message, RecordDict
from flwr.serverapp import Grid

from ...fl import payload as pl
from ...fl.privacy.server import PrivacyConfig
from ...fl.round import Answer, ClientFailed, client_seed
from ...fl.server import RunConfig
from ...fl.strategy import Strategy
from ...fl.types import RoundRecord
from . import protocol as pr
from .app import run_config_from
from .cohort_server import CohortFlowerStrategy
from .nodes import GONE
from .private_server import AfterExchange, PrivateFlowerStrategy, privacy_config_from
from .records import ArrayCache, payload_to_record
from .server import DEFAULT_STARTUP_GRACE


def collusion_refusal(privacy: PrivacyConfig, n: int, cohorts: list[int], colluding_nodes: int) -> str:
    """Why a round of ``n`` sampled clients, on nodes with cohorts of ``cohorts`` sizes, may not run
    under secure aggregation ("" when it may): the ``colluding_nodes`` largest cohorts hold more
    clients than the ``colluders_for(n)`` the SecAgg+ graph is built against."""
    allowed = privacy.colluders_for(n)
    worst = sum(sorted(cohorts, reverse=True)[:colluding_nodes])
    if worst <= allowed:
        return ""
    return (
        f"cohort nodes: {worst} of the round's {n} clients sit on the {colluding_nodes} largest cohort(s), more "
        f"than the {allowed} colluders SecAgg+ is built for (corrupt_fraction {privacy.corrupt_fraction}); a "
        "node sees its clients' secrets, so the round is not run (more nodes, fewer clients a round per node, "
        "or a larger corrupt_fraction)"
    )


class CohortPrivateFlowerStrategy(PrivateFlowerStrategy, CohortFlowerStrategy):
    """A fedkernels strategy over Flower with cohort nodes and private rounds.

    Args:
        strategy, num_features, num_classes, num_clients, config, privacy, after_exchange: as for
            :class:`~.private_server.PrivateFlowerStrategy` (``config.batch_clients``: a node trains
            its clients of a train message in one batched pass, as the in-process ``PrivateServer``).
        colluding_nodes: how many nodes may collude with the server; their clients count as
            colluders (see the module docstring). 0 trusts every node (not recommended).
        startup_grace, max_in_flight: as for :class:`~.server.FlowerStrategy`.

    The round is :class:`~.private_server.PrivateFlowerStrategy`'s; the shard map, one message per
    node and the reply checks are :class:`~.cohort_server.CohortFlowerStrategy`'s.

    Raises:
        NotImplementedError: a strategy with a setup exchange (as cohort nodes).
        ValueError: ``colluding_nodes`` < 0; the checks of ``PrivateFlowerStrategy``.
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
        colluding_nodes: int = 1,
        startup_grace: float = DEFAULT_STARTUP_GRACE,
        max_in_flight: int | None = None,
    ) -> None:
        if isinstance(colluding_nodes, bool) or not isinstance(colluding_nodes, int) or colluding_nodes < 0:
            raise ValueError(f"colluding_nodes must be an int >= 0, got {colluding_nodes!r}")
        super().__init__(
            strategy, num_features, num_classes, num_clients, config, privacy, after_exchange,
            startup_grace=startup_grace, max_in_flight=max_in_flight,
        )  # fmt: skip
        self.colluding_nodes = colluding_nodes
        self._checked: dict[int, str] = {}  # round -> its collusion refusal ("" : it may run)

    def record(self, rec: RoundRecord) -> None:
        """As the one-client path; a round refused for its cohorts says so in ``skipped``."""
        why = self._checked.get(rec.round, "")
        if why:  # refused before its first exchange: nothing was sent
            rec.skipped, rec.bytes_down, rec.bytes_up = why, 0, 0
        super().record(rec)

    def exchange_private(
        self, grid: Grid, kind: str, round: int, messages: Mapping[int, bytes], reply_limit: int
    ) -> dict[int, Answer]:
        """Send each live node one :data:`~.protocol.COHORT_PRIVATE` query with its clients' messages
        of ``kind``; each client's reply bytes (bounded by ``reply_limit``) or its failure."""
        if round not in self._checked:  # the round's first exchange names all its sampled clients
            self._checked = {round: self._refusal(messages)}
        if self._checked[round]:
            return dict.fromkeys(messages, ClientFailed(self._checked[round]))
        online = set(grid.get_node_ids())  # a node that left drops all its clients now
        out: dict[int, Answer] = {}
        live: dict[int, bytes] = {}
        for c, raw in messages.items():
            node = self.nodes.node_of.get(c)
            if node is None or node not in online:
                out[c] = ClientFailed(self.nodes.failure(c) if node is None else GONE)
            else:
                live[c] = raw
        seeds = {c: client_seed(self.config.seed, round, c) for c in live}
        cache, decoded = ArrayCache(), {}
        self._sent = {}
        for node, clients in self._by_node(list(live)).items():
            records: dict[str, Any] = {}
            which: list[int] = []
            index: dict[int, int] = {}  # id of a message's bytes -> its index in this node's message
            for c in clients:
                raw = live[c]
                i = index.setdefault(id(raw), len(index))
                if id(raw) not in decoded:  # one message for many clients (a session's parameters)
                    decoded[id(raw)] = payload_to_record(pl.decode(raw), cache)
                records[f"{pr.COHORT_DOWNLOAD}{i}"] = decoded[id(raw)]
                which.append(i)
            head = self._cohort_header(round, clients, seeds, kind=kind, **{"download-of": which})
            msg = Message(
                RecordDict({pr.KEY: head, **records}),
                node,
                pr.COHORT_PRIVATE,
                group_id=f"{kind}-{round + 1}",
                ttl=self._ttl(),
            )
            self._sent[node] = (msg, clients)
        for node, reply in self._match(self._push(grid, [m for m, _ in self._sent.values()])).items():
            got, _ = self._split(node, reply, lambda c: reply_limit, weighted=False)
            out.update(cast("dict[int, Answer]", got))  # not carried: bytes, never Carried
        if self.after_exchange is not None:
            self.after_exchange(kind, round)
        return out

    def _refusal(self, clients: Mapping[int, bytes]) -> str:
        """:func:`collusion_refusal` of the round's sampled ``clients`` (secure aggregation only)."""
        if not self.privacy.secagg or not clients:
            return ""
        cohorts: dict[int | None, int] = {}
        for c in clients:
            node = self.nodes.node_of.get(c)
            cohorts[node] = cohorts.get(node, 0) + 1
        cohorts.pop(None, None)  # clients without a node fail anyway; they hold no one's secrets
        return collusion_refusal(self.privacy, len(clients), list(cohorts.values()), self.colluding_nodes)


def cohort_private_strategy_from(
    context: Context,
    strategy: Strategy,
    num_features: int,
    num_classes: int,
    num_clients: int,
    **defaults: object,
) -> CohortPrivateFlowerStrategy:
    """A :class:`CohortPrivateFlowerStrategy` from ``run_config``: the keys of
    :func:`~.cohort_server.cohort_strategy_from`, the privacy keys of
    :func:`~.private_server.privacy_config_from`, and ``colluding-nodes`` (default 1).

    Raises:
        ValueError: an invalid or absent privacy setting, or ``colluding-nodes`` < 0 (the key named).
    """
    c = context.run_config
    privacy = privacy_config_from(context)
    if privacy is None:
        raise ValueError("run config asks for no secure aggregation or client-level DP (secagg, dp-clip)")
    config = run_config_from(context, **defaults)
    if "batch-clients" in c:
        config = dataclasses.replace(config, batch_clients=bool(c["batch-clients"]))
    colluding = c.get("colluding-nodes", 1)
    if isinstance(colluding, bool) or not isinstance(colluding, int) or colluding < 0:
        raise ValueError(f"run config key 'colluding-nodes' must be an int >= 0, got {colluding!r}")
    return CohortPrivateFlowerStrategy(
        strategy,
        num_features,
        num_classes,
        num_clients,
        config,
        privacy,
        colluding_nodes=colluding,
        startup_grace=float(c.get("startup-grace", DEFAULT_STARTUP_GRACE)),
        max_in_flight=int(c.get("max-in-flight", 0)) or None,
    )
