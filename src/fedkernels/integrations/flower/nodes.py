"""Which SuperNode is which client, for nodes that come and go.

The registry maps clients (``partition-id`` 0..N-1) to the Flower node ids that serve them. It is
refreshed before every round from the SuperLink's list of online nodes: only nodes it has never
seen are asked who they are (:data:`~.protocol.IDENTIFY`), a node that left frees its client, and a
node that joins (or rejoins under a new node id) takes a free client.

Claims are checked, never fatal: a claim of a client outside ``[0, N)``, from a node whose
fedkernels version or strategy options differ from the server's, or (with ``partition_keys``)
from a node whose authenticated public key is not the one registered for that client is refused;
a claim of a client another live node already serves is refused too but kept as a standby, which
takes over when the holder leaves (e.g. a node restarted before the SuperLink noticed the old
one was gone). Every refusal and change is appended to :attr:`NodeRegistry.events`.

With SuperNode authentication (``flower-superlink --enable-supernode-auth``, keys registered
with ``flwr supernode register``), the SuperLink admits only registered keys and a node keeps its
node id across restarts; ``partition_keys`` then ties each client to one key, so a node's client
is no longer what it declares but what its key was registered for.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GONE = "gone (node left)"
NOT_CONNECTED = "not connected"


@dataclass
class NodeEvent:
    """One change of the client-to-node map: ``kind`` is "joined", "left", "took over", "refused"."""

    round: int
    kind: str
    node: int
    client: int | None
    reason: str = ""


@dataclass
class NodeRegistry:
    """The client-to-node map of a run.

    Args:
        num_clients: clients are ``0..num_clients-1``.
        partition_keys: optional client -> the PEM public key (SubjectPublicKeyInfo, as Flower
            stores it) of the only node allowed to serve that client.
    """

    num_clients: int
    partition_keys: dict[int, bytes] | None = None
    node_of: dict[int, int] = field(default_factory=dict)  # client -> serving node
    client_of: dict[int, int] = field(default_factory=dict)  # serving node -> client
    examples: dict[int, int] = field(default_factory=dict)  # client -> example count its last reply gave
    standby: dict[int, int] = field(default_factory=dict)  # refused duplicate node -> the client it claims
    refused: dict[int, str] = field(default_factory=dict)  # node -> why it serves no client
    left: set[int] = field(default_factory=set)  # clients whose node left (and none serves them now)
    seen: set[int] = field(default_factory=set)  # every node ever asked
    events: list[NodeEvent] = field(default_factory=list)

    def unknown(self, online: set[int]) -> list[int]:
        """The online nodes never asked who they are, ascending."""
        return sorted(online - self.seen)

    def complete(self) -> bool:
        """Whether every client has a node."""
        return len(self.node_of) == self.num_clients

    def claim(self, round: int, node: int, client: object, public_key: bytes | None, refusal: str | None) -> None:
        """Record node ``node``'s answer to the identify query: the client it claims, its public key
        (from the SuperLink's node info; ``None`` if unknown) and ``refusal`` (why its version or
        options do not fit, or ``None``)."""
        self.seen.add(node)
        cid = client if type(client) is int else None
        if refusal is None and (cid is None or not 0 <= cid < self.num_clients):
            refusal = f"claims client {client!r}, not one of 0..{self.num_clients - 1}"
        if refusal is None and self.partition_keys is not None:
            want = self.partition_keys.get(cid)  # type: ignore[arg-type]
            if want is None or public_key is None or _pem(public_key) != _pem(want):
                refusal = f"its key is not the one registered for client {cid}"
        if refusal is not None:
            self._refuse(round, node, cid, refusal)
            return
        assert cid is not None
        holder = self.node_of.get(cid)
        if holder is not None and holder != node:
            self.standby[node] = cid
            self._refuse(round, node, cid, f"duplicate claim of client {cid} (node {holder} serves it)")
            return
        self._serve(round, node, cid, "joined")

    def fail_identify(self, round: int, node: int, reason: str) -> None:
        """Node ``node`` did not answer the identify query properly: asked again next round."""
        self.events.append(NodeEvent(round, "unidentified", node, None, reason))

    def refresh(self, round: int, online: set[int]) -> None:
        """Drop nodes that are no longer online (one that comes back is asked again); hand their
        clients to a standby node, if one is online."""
        for node in sorted(set(self.client_of) - online):
            cid = self.client_of.pop(node)
            del self.node_of[cid]
            self.left.add(cid)
            self.events.append(NodeEvent(round, "left", node, cid))
        for node in self.seen - online:  # e.g. an authenticated node restarting keeps its id
            self.standby.pop(node, None)
            self.refused.pop(node, None)
        self.seen &= online
        for node, cid in sorted(self.standby.items()):
            if cid not in self.node_of:
                del self.standby[node]
                self.refused.pop(node, None)
                self._serve(round, node, cid, "took over")

    def failure(self, client: int) -> str:
        """Why ``client`` cannot be reached now: its node left, or it never had one."""
        return GONE if client in self.left else NOT_CONNECTED

    def _serve(self, round: int, node: int, cid: int, kind: str) -> None:
        self.node_of[cid], self.client_of[node] = node, cid
        self.left.discard(cid)
        self.events.append(NodeEvent(round, kind, node, cid))

    def _refuse(self, round: int, node: int, cid: int | None, reason: str) -> None:
        self.refused[node] = reason
        self.events.append(NodeEvent(round, "refused", node, cid, reason))


def _pem(key: bytes) -> bytes:
    """A PEM key's bytes without surrounding whitespace (compared as written by Flower)."""
    return key.strip()
