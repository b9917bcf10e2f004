"""Cohort nodes over a :class:`~fedkernels.data.client_store.ClientStore`: a node maps the population's
store and reads only the round's sampled clients of its shard.

:class:`StoreLoader` is the ``load_data`` of :func:`~.cohort_client.cohort_client_app`: it opens the
memory-mapped store once per process (the store's folder from ``node_config["client-store"]``, else
``run_config["client-store"]``, else the store it was built with; a store pickles as its path, so a
simulation worker maps the files itself) and reads client c with :meth:`ClientStore.load`, keeping
nothing: the node's own cache (``cache_clients``, least recently used out) is the one bound on resident
clients, so a node's memory grows with its cohort, not with its shard. :func:`store_client_app` is the
ClientApp built that way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from flwr.app import Context
from flwr.clientapp import ClientApp

from ...data.client_store import ClientStore
from ...fl.strategy import Strategy
from ...fl.types import ClientData
from .cohort_client import cohort_client_app

STORE_KEY = "client-store"  # node_config / run_config key: the store's folder


def store_path(context: Context) -> str | None:
    """The store folder ``context`` names: ``node_config["client-store"]``, else ``run_config``'s, else None."""
    for config in (context.node_config, context.run_config):
        v = config.get(STORE_KEY)
        if v is not None and v != "":
            return str(v)
    return None


class StoreLoader:
    """``(context, client) -> ClientData`` read from the store the context names (else ``store``).

    Args:
        store: the store (or its folder) used when neither config names one; a ``ClientStore`` is
            reopened by path in another process.

    Attributes:
        stores: folder -> the store opened in this process (mapped once, ``max_resident=0``).
        loads: how many clients this loader read from its stores.

    Raises (when called):
        ValueError: no store is named (neither config, nor ``store``), or the folder is not a store.
        IndexError: ``client`` is outside the store.
    """

    def __init__(self, store: ClientStore | str | Path | None = None) -> None:
        self.default = None if store is None else str(store.path if isinstance(store, ClientStore) else store)
        self.stores: dict[str, ClientStore] = {}
        self.loads = 0

    def store(self, context: Context) -> ClientStore:
        """The store ``context`` names (opened once per folder in this process)."""
        path = store_path(context) or self.default
        if path is None:
            raise ValueError(
                f"no client store: set node_config[{STORE_KEY!r}] or run_config[{STORE_KEY!r}] to the store's "
                "folder, or build the loader with a store"
            )
        if path not in self.stores:
            self.stores[path] = ClientStore(path, max_resident=0)  # the node's cache bounds what is kept
        return self.stores[path]

    def __call__(self, context: Context, client: int) -> ClientData:
        data = self.store(context).load(client)
        self.loads += 1
        return data

    def __getstate__(self) -> dict:
        # a simulation worker maps the files itself: carry the default folder, not the opened maps
        return {"default": self.default}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["default"])  # type: ignore[misc]


def store_client_app(
    make_strategy: Callable[[Context], Strategy],
    store: ClientStore | str | Path | None = None,
    cache_clients: int = 256,
    mods: Sequence[Callable] | None = None,
) -> ClientApp:
    """A cohort-node ClientApp (:func:`~.cohort_client.cohort_client_app`) whose clients come from a store
    (:class:`StoreLoader`); ``cache_clients`` bounds the clients it keeps between rounds (a round's
    cohort of the node, or fewer, keeps memory at the cohort's).

    Raises:
        ValueError: ``cache_clients`` < 1.
    """
    return cohort_client_app(make_strategy, StoreLoader(store), cache_clients=cache_clients, mods=mods)
