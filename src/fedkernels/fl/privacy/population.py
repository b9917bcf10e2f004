"""The in-process clients of a :class:`~fedkernels.fl.privacy.server.PrivateServer`, made when first
asked for and kept without their round's secrets once the round is over.

A population of 10^5 clients in a :class:`~fedkernels.data.client_store.ClientStore` is not read at
setup: a client is made the first time a round asks for it, and reads its data from the store each
time it needs it. A client's contribution in the clear and its SecAgg+ secrets are read only in its
round, so :meth:`PrivateClients.end_round` drops them from every client the round used: what the
server holds grows with one round's cohort, not with the clients ever sampled.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, overload

from .client import PrivateClient


class PrivateClients(Sequence[PrivateClient]):
    """Client id -> its :class:`PrivateClient`, made on first use by ``make(client_id)``, and its
    endpoint (``wrap(client_id, client)``, e.g. a test's client that drops out, or the client itself).

    Args:
        make: builds client ``c``'s PrivateClient.
        num_clients: the population's size.
        wrap: optional ``(client_id, PrivateClient) -> endpoint`` answering ``handle``.
    """

    def __init__(
        self, make: Callable[[int], PrivateClient], num_clients: int, wrap: Callable[[int, Any], Any] | None = None
    ) -> None:
        self._make, self._n, self._wrap = make, num_clients, wrap
        self._clients: dict[int, PrivateClient] = {}
        self._endpoints: dict[int, Any] = {}
        self._used: set[int] = set()

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, c: int) -> PrivateClient: ...

    @overload
    def __getitem__(self, c: slice) -> list[PrivateClient]: ...

    def __getitem__(self, c: int | slice) -> PrivateClient | list[PrivateClient]:
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(self._n))]
        i = operator.index(c)
        i += self._n if i < 0 else 0
        if not 0 <= i < self._n:
            raise IndexError(f"client {c} out of range for {self._n} clients")
        client = self._clients.get(i)
        if client is None:
            client = self._clients[i] = self._make(i)
        self._used.add(i)
        return client

    def endpoint(self, c: int) -> Any:
        """Client ``c``'s endpoint: its wrapper (made once, kept) or the client itself."""
        ep = self._endpoints.get(c)
        if ep is None:
            client = self[c]
            ep = self._endpoints[c] = self._wrap(c, client) if self._wrap is not None else client
        self._used.add(c)
        return ep

    @property
    def num_made(self) -> int:
        """How many clients were made so far."""
        return len(self._clients)

    def end_round(self) -> None:
        """Every client used since the last call drops its round's secrets (:meth:`PrivateClient.end_round`)."""
        for c in self._used:
            self._clients[c].end_round()
        self._used.clear()
