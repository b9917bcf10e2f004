"""The in-process server's clients over a :class:`~fedkernels.data.client_store.ClientStore`, made on demand.

With a list of :class:`ClientData` the server builds one :class:`LocalClient` per client up front. Over a
store it must not (that would read the whole population), so :class:`StoreClients` makes client c's
``LocalClient`` when it is first asked for and keeps at most ``resident`` of them, least recently used
out first; a stateful client's kept tensors (its ``memory``) outlive its eviction. :class:`Endpoints`
puts a client wrapper (a fault injector, a test's client) around each on access, and :class:`ExampleCounts`
answers each client's aggregation weight from the store's offsets without reading a client.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import torch

from ..data.client_store import ClientStore
from . import payload as pl
from .client import ClientEndpoint, LocalClient
from .strategy import Strategy
from .types import ClientData, TrainConfig


class StoreClients(Sequence[LocalClient]):
    """Client c's honest :class:`LocalClient` over ``store.load(c)``, at most ``resident`` kept.

    Args:
        strategy, train, device: as :class:`LocalClient`'s.
        store: the population.
        resident: the most clients (and so client data) kept materialised (>= 1). A round asks for its
            cohort several times (requests, the batch check, updates), so fewer than a round's clients
            reread some of them every round.
    """

    def __init__(
        self, strategy: Strategy, store: ClientStore, train: TrainConfig, device: torch.device, resident: int
    ) -> None:
        if resident < 1:
            raise ValueError(f"resident must be >= 1, got {resident}")
        self.strategy, self.store, self.train, self.device, self.resident = strategy, store, train, device, resident
        self._cache: OrderedDict[int, LocalClient] = OrderedDict()
        # stateful clients' kept tensors, moved here when their LocalClient is evicted
        self._memory: dict[int, pl.Payload] = {}
        self.made = 0
        """How many LocalClients were made (each read its client from the store)."""

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, c):
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(len(self)))]
        c = int(c) + (len(self) if int(c) < 0 else 0)
        hit = self._cache.get(c)
        if hit is not None:
            self._cache.move_to_end(c)
            return hit
        client = LocalClient(self.strategy, self.store.load(c), self.train, self.device)
        client.memory = self._memory.pop(c, None)
        self.made += 1
        self._cache[c] = client
        while len(self._cache) > self.resident:
            old, gone = self._cache.popitem(last=False)
            if gone.memory is not None:
                self._memory[old] = gone.memory
        return client

    def __iter__(self) -> Iterator[LocalClient]:
        for c in range(len(self)):
            yield self[c]

    @property
    def num_resident(self) -> int:
        """How many clients (with their data) are materialised now."""
        return len(self._cache)


class Endpoints(Sequence[ClientEndpoint]):
    """``wrapper(c, clients[c])`` made on access (a wrapper keeps its own state elsewhere, as
    :class:`~fedkernels.fl.faults.FaultInjector` does: one made afresh per call must act the same)."""

    def __init__(self, clients: Sequence[ClientEndpoint], wrapper: Callable[[int, ClientEndpoint], ClientEndpoint]):
        self.clients, self.wrapper = clients, wrapper

    def __len__(self) -> int:
        return len(self.clients)

    def __getitem__(self, c):
        if isinstance(c, slice):
            return [self[i] for i in range(*c.indices(len(self)))]
        c = int(c) + (len(self) if int(c) < 0 else 0)
        return self.wrapper(c, self.clients[c])


class ExampleCounts(Mapping[int, int]):
    """Each client's aggregation weight: its example count, or with ``uniform`` 1 for a client holding
    data (0 for an empty one), from an int64 ``[C]`` array of counts."""

    def __init__(self, counts: np.ndarray | Sequence[int], uniform: bool) -> None:
        self.counts, self.uniform = np.asarray(counts, dtype=np.int64), uniform

    def __getitem__(self, c: int) -> int:
        if not 0 <= c < len(self.counts):
            raise KeyError(c)
        n = int(self.counts[c])
        return int(n > 0) if self.uniform else n

    def __len__(self) -> int:
        return len(self.counts)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.counts)))


def example_counts(clients: Sequence[ClientData]) -> np.ndarray:
    """int64 ``[C]``: each client's example count (a store's from its index; a list's by ``len``)."""
    if isinstance(clients, ClientStore):
        return clients.num_examples
    return np.array([len(d) for d in clients], dtype=np.int64)
