"""An in-memory Flower grid for the adapter's fast tests: messages pushed to a node are run by that
node's ClientApp in this process when pulled, like a SuperNode would, so the real FlowerStrategy
and client_app talk through real Flower Message/ArrayRecord objects without any process.

Flower's ``Message`` constructor reads the running task's identity (run and node id), which
Flower's runtime sets; :func:`task_identity` sets it by hand for these tests (the one place the
tests touch a Flower internal; the load test and the deployment tests use Flower's public API only).
"""

from __future__ import annotations

import dataclasses
import itertools

from flwr.app import Context, Error, Message, RecordDict


def task_identity(monkeypatch) -> None:
    """Give this process a Flower task identity (run 1, node 1, task 1) for the test's duration."""
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in [("_run_id", 1), ("_node_id", 1), ("_task_id", 1)]:
        monkeypatch.setattr(TaskIdentity, attr, value)


@dataclasses.dataclass
class NodeInfo:
    """What ``Grid.get_nodes()`` gives per node (the fields the adapter reads)."""

    node_id: int
    public_key: bytes = b""


class MemoryGrid:
    """Nodes ``apps[node] = (client_app, context)``. ``silent`` nodes never answer train messages
    (a deadline passes); an exception in a ClientApp becomes an error reply, as on a SuperNode.
    ``offline`` nodes are not listed by ``get_node_ids`` (they left). ``keys[node]`` is a node's
    public key as ``get_nodes`` reports it."""

    def __init__(self, apps: dict[int, tuple[object, Context]], silent=frozenset(), keys=None) -> None:
        self.apps, self.silent = dict(apps), set(silent)
        self.offline: set[int] = set()
        self.keys = dict(keys or {})
        self.outbox: dict[str, Message] = {}
        self.sent: list[Message] = []  # every message pushed, in order
        self._ids = itertools.count(1)

    def get_node_ids(self) -> list[int]:
        return [n for n in self.apps if n not in self.offline]

    def get_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n, self.keys.get(n, b"")) for n in self.get_node_ids()]

    def push_messages(self, messages) -> list[str]:
        ids = []
        for m in messages:
            mid = f"m{next(self._ids)}"
            m.metadata.__dict__["_message_id"] = mid  # as Flower's grids set it on push
            self.outbox[mid] = m
            self.sent.append(m)
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids) -> list[Message]:
        replies = []
        for mid in list(message_ids):
            m = self.outbox.pop(mid, None)
            if m is None:
                continue
            node = m.metadata.dst_node_id
            if node in self.offline or (node in self.silent and m.metadata.message_type == "train"):
                continue
            app, ctx = self.apps[node]
            try:
                replies.append(app(m, ctx))
            except Exception as e:
                replies.append(Message(Error(code=1, reason=f"{type(e).__name__}: {e}"), reply_to=m))
        return replies


def context(node: int, partition: int, run_config=None, run_id: int = 1) -> Context:
    """A node's Context: ``partition-id`` in its node config. A client app caches what a node loaded per
    run and node, so runs of different apps or settings in one process take different ``run_id``s."""
    return Context(run_id, node, {"partition-id": partition}, RecordDict(), dict(run_config or {}))
