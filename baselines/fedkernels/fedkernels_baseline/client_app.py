"""The ClientApp: node ``partition-id`` trains as client ``partition-id`` of the preset's partition."""

from __future__ import annotations

from flwr.app import Context

from fedkernels.fl import ClientData
from fedkernels.integrations.flower import client_app, partition_id

from .task import data, strategy


def client_data(context: Context) -> ClientData:
    """This node's client: ``node_config["partition-id"]`` of the preset's partition, whose client
    count must equal the federation's ``num-partitions`` when the node reports one."""
    clients = data(context).clients
    n = context.node_config.get("num-partitions")
    if n is not None and int(n) != len(clients):
        raise ValueError(
            f"preset {context.run_config['preset']} deals {len(clients)} clients but this federation has "
            f"num-partitions={n}: run it with {len(clients)} SuperNodes (options.num-supernodes = {len(clients)})"
        )
    cid = partition_id(context)
    if cid >= len(clients):
        raise ValueError(f"partition-id {cid} is not one of the preset's {len(clients)} clients")
    return clients[cid]


app = client_app(strategy, client_data)
