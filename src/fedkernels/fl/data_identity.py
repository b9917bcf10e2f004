"""The identity of a run's data: a SHA-256 over every client's features and labels.

A checkpoint holds it in its run identity, so resuming on other data with the same shapes (another
dataset, another split or partition, other preprocessing) is refused instead of silently mixing two
runs. It costs one hashing pass over the data, once per server, and only when a checkpoint
is written or read; a :class:`~fedkernels.data.client_store.ClientStore` hashed its clients when it was
written and answers without reading them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..data.client_store import ClientStore
from ..data.fingerprint import add_client, new_fingerprint
from .types import ClientData


def data_fingerprint(clients: Sequence[ClientData]) -> str:
    """Hex SHA-256 over every client in order: features (dense values, or a sparse CSR's row
    pointer, column ids and values), label CSR (indptr, indices) and class count. A store gives the
    fingerprint its writer computed (the same value as its clients in a list)."""
    if isinstance(clients, ClientStore):
        return clients.fingerprint
    h = new_fingerprint(len(clients))
    for c in clients:
        add_client(h, c)
    return h.hexdigest()
