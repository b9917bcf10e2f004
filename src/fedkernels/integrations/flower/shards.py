"""Which cohort node serves which clients: shards of the population for nodes that come and go.

In cohort mode (:mod:`.cohort_server`) a SuperNode owns a shard, a range ``[start, stop)`` of
client ids, instead of one client. A node names its shard in its answer to the identify query
(:func:`node_shard`: ``node_config["shard"] = "start:stop"``, else block ``partition-id`` of
``num-partitions`` equal blocks of the clients, as Flower's simulation engine numbers its nodes).

:class:`ShardRegistry` is :class:`~.nodes.NodeRegistry` for shards: refreshed before every round
from the SuperLink's online nodes, only nodes never seen are asked, a node that left frees its
clients, and claims are checked, never fatal: a shard outside ``[0, N)`` or empty, a node whose
version or strategy options differ, and a shard that overlaps a live node's shard are refused (the
overlapping node is kept as a standby that takes over once its whole shard is free). Every refusal
and change is appended to :attr:`ShardRegistry.events`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .nodes import GONE, NOT_CONNECTED

Shard = tuple[int, int]  # [start, stop)


@dataclass
class ShardEvent:
    """One change of the shard map: ``kind`` is "joined", "left", "took over", "refused" or
    "unidentified"; ``shard`` is ``[start, stop]`` (None when the node named none)."""

    round: int
    kind: str
    node: int
    shard: list[int] | None
    reason: str = ""


def node_shard(node_config: Mapping[str, object], num_clients: int) -> Shard:
    """The shard a node serves: ``node_config["shard"]`` (``"start:stop"``, half-open), else block
    ``partition-id`` of ``num-partitions`` contiguous blocks of ``num_clients`` (block i is
    ``[i * N // P, (i + 1) * N // P)``).

    Raises:
        ValueError: a malformed ``shard``, or no valid ``partition-id`` / ``num-partitions``.
    """
    spec = node_config.get("shard")
    if spec is not None:
        parts = str(spec).split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f'node_config["shard"] must be "start:stop" (two ints >= 0), got {spec!r}')
        return int(parts[0]), int(parts[1])
    pid, parts_n = node_config.get("partition-id"), node_config.get("num-partitions")
    for name, v in (("partition-id", pid), ("num-partitions", parts_n)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"node_config[{name!r}] must be an int (or set node_config['shard']), got {v!r}")
    assert isinstance(pid, int) and isinstance(parts_n, int)
    if not 0 <= pid < parts_n:
        raise ValueError(f"node_config['partition-id'] must be in [0, num-partitions={parts_n}), got {pid}")
    return pid * num_clients // parts_n, (pid + 1) * num_clients // parts_n


@dataclass
class ShardRegistry:
    """The shard map of a cohort run: clients ``0..num_clients-1``.

    Attributes:
        shard_of: serving node -> its shard.
        node_of: client -> serving node.
        standby: refused overlapping node -> the shard it claims.
        refused: node -> why it serves nothing.
        left: clients whose node left (and none serves them now).
        seen: every node asked.
        events: the map's changes.
    """

    num_clients: int
    shard_of: dict[int, Shard] = field(default_factory=dict)
    node_of: dict[int, int] = field(default_factory=dict)
    standby: dict[int, Shard] = field(default_factory=dict)
    refused: dict[int, str] = field(default_factory=dict)
    left: set[int] = field(default_factory=set)
    seen: set[int] = field(default_factory=set)
    events: list[ShardEvent] = field(default_factory=list)

    def unknown(self, online: set[int]) -> list[int]:
        """The online nodes never asked which shard they serve, ascending."""
        return sorted(online - self.seen)

    def complete(self) -> bool:
        """Whether every client has a node."""
        return len(self.node_of) == self.num_clients

    def claim(self, round: int, node: int, start: object, stop: object, refusal: str | None) -> None:
        """Record node ``node``'s answer to the identify query: the shard ``[start, stop)`` it claims
        and ``refusal`` (why its version or options do not fit, or ``None``)."""
        self.seen.add(node)
        shard = (start, stop) if isinstance(start, int) and isinstance(stop, int) else None
        if type(start) is bool or type(stop) is bool:
            shard = None
        if refusal is None and (shard is None or not 0 <= shard[0] < shard[1] <= self.num_clients):
            refusal = f"claims shard [{start!r}, {stop!r}), not a non-empty range within [0, {self.num_clients})"
        if refusal is not None:
            self._refuse(round, node, shard, refusal)
            return
        assert shard is not None
        holder = self._overlap(shard, node)
        if holder is not None:
            self.standby[node] = shard
            a, b = self.shard_of[holder]
            self._refuse(round, node, shard, f"shard [{shard[0]}, {shard[1]}) overlaps node {holder}'s [{a}, {b})")
            return
        self._serve(round, node, shard, "joined")

    def fail_identify(self, round: int, node: int, reason: str) -> None:
        """Node ``node`` did not answer the identify query properly: asked again next round."""
        self.events.append(ShardEvent(round, "unidentified", node, None, reason))

    def refresh(self, round: int, online: set[int]) -> None:
        """Drop nodes no longer online (their clients are "gone"); a standby whose whole shard is
        free then takes it over."""
        for node in sorted(set(self.shard_of) - online):
            a, b = self.shard_of.pop(node)
            for c in range(a, b):
                del self.node_of[c]
            self.left.update(range(a, b))
            self.events.append(ShardEvent(round, "left", node, [a, b]))
        for node in self.seen - online:
            self.standby.pop(node, None)
            self.refused.pop(node, None)
        self.seen &= online
        for node, shard in sorted(self.standby.items()):
            if self._overlap(shard, node) is None:
                del self.standby[node]
                self.refused.pop(node, None)
                self._serve(round, node, shard, "took over")

    def failure(self, client: int) -> str:
        """Why ``client`` cannot be reached now: its node left, or it never had one."""
        return GONE if client in self.left else NOT_CONNECTED

    def _overlap(self, shard: Shard, node: int) -> int | None:
        """A live node other than ``node`` whose shard meets ``shard`` (the lowest such id), or None."""
        hits = [n for n, (a, b) in self.shard_of.items() if n != node and a < shard[1] and shard[0] < b]
        return min(hits) if hits else None

    def _serve(self, round: int, node: int, shard: Shard, kind: str) -> None:
        self.shard_of[node] = shard
        for c in range(*shard):
            self.node_of[c] = node
        self.left.difference_update(range(*shard))
        self.events.append(ShardEvent(round, kind, node, list(shard)))

    def _refuse(self, round: int, node: int, shard: Shard | None, reason: str) -> None:
        self.refused[node] = reason
        self.events.append(ShardEvent(round, "refused", node, None if shard is None else list(shard), reason))
