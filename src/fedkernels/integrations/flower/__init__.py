"""Flower (flwr >= 1.42, the Message API) for every fedkernels strategy, through one generic adapter.

:class:`FlowerStrategy` (a ``flwr.serverapp.strategy.Strategy``) is a transport of the round
protocol (:mod:`fedkernels.fl.round`) that the in-process :class:`fedkernels.fl.Server` drives
too, so a Flower run ends bit-identical to the in-process run with the same seed.
:func:`client_app` runs the strategy's client side (fedkernels' local training and kernels) on a
SuperNode, real or simulated; :func:`server_app` runs (and resumes) the strategy on the SuperLink.

The protocol scales with the clients per round, not with the clients: each node is asked once who
it is (:mod:`.nodes`, without loading data), each round's chosen clients get their download as
ArrayRecords that Flower chunks and de-duplicates (:mod:`.records`), replies carry each client's
example count, federated evaluation goes to a stated sample, and deadlines count per message with
queueing (:mod:`.exchange`). Messages and the version/run-identity handshake: :mod:`.protocol`.
Secure aggregation and DP over Flower: :mod:`.private_server` (``PrivateFlowerStrategy``, imported
from there: it needs the extra ``fedkernels[privacy]``) and :mod:`.private_client`.

Cohort nodes (:mod:`.cohort_server`, :mod:`.cohort_client`, :mod:`.shards`): each SuperNode serves a
shard of the clients and gets one message per round for its sampled clients, so the number of
Flower nodes is the number of machines or workers, not of clients; :mod:`.store_nodes` serves a
node's clients from a memory-mapped ClientStore (only the sampled ones are read). Their private rounds
(SecAgg+ and DP, every client its own participant): :mod:`.cohort_private_server`
(``CohortPrivateFlowerStrategy``, imported from there: it needs ``fedkernels[privacy]``) and
:mod:`.cohort_private_client`.

Requires the optional extra ``fedkernels[flower]``.
"""

from .app import (
    FLOWER_KEYS,
    PRIVACY_KEYS,
    RUN_CONFIG_KEYS,
    flower_strategy_from,
    read_partition_keys,
    run_config_from,
    server_app,
)
from .client import client_app, partition_id
from .cohort_client import cohort_client_app
from .cohort_server import CohortFlowerStrategy, cohort_strategy_from
from .nodes import NodeEvent, NodeRegistry
from .protocol import IDENTIFY, KEY, PAYLOAD, PRIVATE, REQUEST, SETUP, fedkernels_version, run_identity
from .records import ArrayCache, payload_to_record, record_to_bytes, record_to_payload
from .server import FlowerStrategy
from .shards import ShardRegistry, node_shard
from .store_nodes import STORE_KEY, StoreLoader, store_client_app

__all__ = [
    "FLOWER_KEYS",
    "IDENTIFY",
    "KEY",
    "PAYLOAD",
    "PRIVACY_KEYS",
    "PRIVATE",
    "REQUEST",
    "RUN_CONFIG_KEYS",
    "SETUP",
    "STORE_KEY",
    "ArrayCache",
    "CohortFlowerStrategy",
    "FlowerStrategy",
    "NodeEvent",
    "NodeRegistry",
    "ShardRegistry",
    "StoreLoader",
    "client_app",
    "cohort_client_app",
    "cohort_strategy_from",
    "fedkernels_version",
    "flower_strategy_from",
    "node_shard",
    "partition_id",
    "payload_to_record",
    "read_partition_keys",
    "record_to_bytes",
    "record_to_payload",
    "run_config_from",
    "run_identity",
    "server_app",
    "store_client_app",
]
