"""A Flower App running a fedkernels strategy (FedMLH by default) on synthetic multi-label data.

Every SuperNode regenerates the same seeded synthetic dataset and trains on the shard its
``partition-id`` names; the ServerApp holds only the test part and evaluates the global model after
each round (centralised evaluation through Flower's ``evaluate_fn``).
"""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from fedkernels.data import Dataset, iid_partition, load_dataset, make_clients
from fedkernels.fl import ClientData, RunConfig, Strategy, TrainConfig
from fedkernels.fl.registry import make_strategy
from fedkernels.integrations.flower import FlowerStrategy, client_app
from fedkernels.metrics import precision_at_k

# Small settings per strategy for this data; any other registered strategy runs with its defaults.
OPTIONS = {
    "fedmlh": dict(num_tables=2, num_buckets=20, hidden=(32,)),
    "fedavg": dict(hidden=(32,)),
    "fedss": dict(num_negatives=10, embed_dim=16, hidden=(32,)),
}


def dataset(seed: int) -> Dataset:
    """The synthetic data every process derives from the run's seed."""
    return load_dataset("synthetic", seed=seed, num_samples=1200, num_features=32, num_classes=50)


def strategy(ctx: Context) -> Strategy:
    name = str(ctx.run_config["strategy"])
    return make_strategy(name, **OPTIONS.get(name.lower(), {}))


def client_data(ctx: Context) -> ClientData:
    seed, n = int(ctx.run_config["seed"]), int(ctx.run_config["num-clients"])
    ds = dataset(seed)
    shards = iid_partition(ds.train.indptr, ds.train.indices, n, seed)
    return make_clients(ds.train.x, shards, ds.num_classes)[int(ctx.node_config["partition-id"])]


server = ServerApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    c = context.run_config
    seed = int(c["seed"])
    ds = dataset(seed)
    cfg = RunConfig(
        rounds=int(c["rounds"]),
        clients_per_round=int(c["clients-per-round"]),
        seed=seed,
        train=TrainConfig(epochs=2, batch_size=32, lr=0.01, optimizer="adam"),
        client_timeout=float(c["timeout"]),
    )
    fk = FlowerStrategy(strategy(context), ds.num_features, ds.num_classes, int(c["num-clients"]), cfg)
    test, rounds = ds.test, []

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        p1 = precision_at_k(fk.strategy.predict_topk(fk.state, test.x, 1), test.indptr, test.indices, 1)
        rounds.append({"round": server_round, "P@1": p1})
        print(f"round {server_round}: test P@1 {p1:.3f}", flush=True)
        return MetricRecord({"P@1": p1})

    fk.start(grid, fk.initial_arrays(), num_rounds=cfg.rounds, timeout=cfg.client_timeout, evaluate_fn=evaluate)
    if str(c["result-file"]):
        Path(str(c["result-file"])).write_text(
            json.dumps(
                {
                    "strategy": fk.strategy.name,
                    "rounds": rounds,
                    "history": [
                        {
                            "round": h.round,
                            "clients": h.clients,
                            "failed": h.failed,
                            "bytes_up": h.bytes_up,
                            "bytes_down": h.bytes_down,
                        }
                        for h in fk.history
                    ],
                },
                indent=1,
            )
        )


client = client_app(strategy, client_data)
