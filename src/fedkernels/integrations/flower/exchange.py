"""Send a batch of messages and collect the replies, with a deadline that accounts for queueing.

A node serves its messages one at a time, and Flower's simulation engine serves all virtual nodes
with a few workers, so the last of 100 messages may start long after the first: one deadline for
the whole fan-out (``Grid.send_and_receive(timeout=...)``) either cuts off clients that were only
waiting their turn or, set long enough for the queue, waits that long for a client that hangs.

Here ``timeout`` is per message, and the clock is progress: the exchange waits while replies keep
coming, and gives up on the rest once ``timeout`` seconds pass with no reply at all (each message
still out then is timed out), or at the hard cap of ``timeout`` seconds per message. A message
that is being served gets ``timeout`` seconds from the last reply before it; one queued behind
others is not charged for their time. Every message carries a time-to-live of the hard cap, so the
SuperLink drops what was not delivered by then instead of running a stale round later.

With ``window``, at most that many messages are out at once (the next is pushed as a reply comes):
Flower's simulation engine scans every pending message for every virtual node several times a
second, so with 1000 nodes a full fan-out of 1000 messages costs it about a million checks a scan;
a window of a few messages per worker keeps the workers busy at a fraction of that.

Replies are matched to messages by ``reply_to_message_id``; a content reply from another node than
the one addressed is ignored (an error reply is accepted from the SuperLink too: e.g. "node
unavailable").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar

from flwr.app import Message

K = TypeVar("K", bound=Hashable)
FIRST_POLL, MAX_POLL = 0.02, 0.5  # seconds between pulls: quick while replies come, backing off when idle


class PushPullGrid(Protocol):
    """The part of Flower's ``Grid`` an exchange uses."""

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]: ...

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]: ...


def hard_cap(timeout: float, num_messages: int) -> float:
    """The most seconds an exchange of ``num_messages`` waits: ``timeout`` per message."""
    return timeout * max(1, num_messages)


class PendingExchange(Generic[K]):
    """An exchange under way: :meth:`__init__` validates and pushes (the first ``window`` messages),
    :meth:`collect` pulls the replies under the progress deadline. Between the two the caller may do
    other work (e.g. aggregate a round while the nodes answer the next round's queries); the deadline
    counts from the push, and replies that came meanwhile are taken at the first pull.

    Args: as :func:`exchange`.

    Raises:
        ValueError: ``timeout`` not positive, or ``window`` < 1.
    """

    def __init__(
        self,
        grid: PushPullGrid,
        messages: Mapping[K, Message],
        timeout: float,
        window: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_poll: float = MAX_POLL,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 or None, got {window}")
        self.grid, self.messages, self.timeout, self.window = grid, messages, timeout, window
        self.clock, self.sleep, self.max_poll = clock, sleep, max_poll
        self.queue = list(messages)
        self.queue.reverse()  # pop() sends them in the caller's order
        self.dst = {k: messages[k].metadata.dst_node_id for k in self.queue}
        self.pending: dict[str, K] = {}
        self.replies: dict[K, Message] = {}
        self.last = self.clock()
        self.end = self.last + hard_cap(timeout, len(self.queue))
        self._push()

    def _push(self) -> None:
        room = len(self.queue) if self.window is None else min(len(self.queue), self.window - len(self.pending))
        batch = [self.queue.pop() for _ in range(room)]
        if batch:
            ids = self.grid.push_messages([self.messages[k] for k in batch])
            # a refused one stays out
            self.pending.update((mid, k) for mid, k in zip(ids, batch, strict=True) if mid)

    def collect(self) -> dict[K, Message]:
        """Wait for the replies: key -> reply for every message answered in time (a reply may carry
        an error); keys missing timed out or were never pushed (the deadline passed first)."""
        poll = FIRST_POLL
        while self.pending:
            progress = False
            for reply in self.grid.pull_messages(list(self.pending)):
                mid = reply.metadata.reply_to_message_id
                k = self.pending.get(mid)
                if k is None or (not reply.has_error() and reply.metadata.src_node_id != self.dst[k]):
                    continue  # a stranger's reply, or one already taken
                self.replies[k] = reply
                del self.pending[mid]
                progress = True
            now = self.clock()
            if progress:
                self.last, poll = now, FIRST_POLL
                self._push()
            if not self.pending or now - self.last >= self.timeout or now >= self.end:
                break
            self.sleep(min(poll, max(0.0, min(self.last + self.timeout, self.end) - now)))
            poll = min(self.max_poll, poll * 1.5)
        self.pending.clear()  # what is still out now timed out: a later collect returns the same replies
        return self.replies


def exchange(
    grid: PushPullGrid,
    messages: Mapping[K, Message],
    timeout: float,
    window: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    max_poll: float = MAX_POLL,
) -> dict[K, Message]:
    """Push ``messages`` (key -> message) and collect their replies under the progress deadline.

    Args:
        grid: Flower's Grid (``push_messages`` / ``pull_messages``).
        messages: what to send, keyed by the caller (e.g. client id). Their TTL should be at least
            :func:`hard_cap` (see :func:`deadline_ttl`).
        timeout: seconds one message may take, counted from the last reply before it.
        window: the most messages out at once (``None``: all of them).
        clock, sleep: time sources (tests pass fake ones).
        max_poll: the most seconds between pulls while waiting (the wait backs off up to it): a
            reply is seen at most this long after it arrives.

    Returns:
        key -> reply for every message answered in time (a reply may carry an error). Keys missing
        from the result timed out (or were never pushed: the deadline passed first).

    Raises:
        ValueError: ``timeout`` not positive, or ``window`` < 1 (with messages to send).
    """
    if not messages:
        return {}
    return PendingExchange(grid, messages, timeout, window, clock, sleep, max_poll).collect()


def deadline_ttl(timeout: float, num_messages: int) -> float:
    """The time-to-live to give each of ``num_messages`` messages of one exchange: its hard cap,
    plus a margin for the push itself."""
    return hard_cap(timeout, num_messages) + 30.0
