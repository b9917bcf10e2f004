"""A Flower App running a fedkernels strategy (FedMLH by default) on synthetic multi-label data.

Every SuperNode trains on the shard its ``partition-id`` names, one of ``num-partitions`` (both
from its ``node_config``: the simulation engine sets them, a real SuperNode gets them with
``--node-config``). The seeded synthetic dataset and its partition are made once per process (the
simulation engine's workers serve many nodes) and a node keeps only its own shard. The run's
settings (rounds, clients per round, seed, timeout, ...) come from Flower's ``run_config``
(``[tool.flwr.app.config]`` in pyproject.toml, overridden by ``flwr run -c``).
The global model is evaluated two ways after each round: centralised, on the test split the
ServerApp holds (``server_app(evaluate_fn=...)``), and federated, each client ranking its own shard
of the test split (``client_app(load_eval_data=...)``; example-weighted P@k/nDCG@k).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from flwr.app import Context

from fedkernels.data import Dataset, iid_partition, load_dataset, make_clients
from fedkernels.fl import ClientData, State, Strategy, TrainConfig
from fedkernels.fl.registry import make_strategy
from fedkernels.integrations.flower import FlowerStrategy, client_app, partition_id, run_config_from, server_app
from fedkernels.metrics import precision_at_k

# Small settings per strategy for this data; any other registered strategy runs with its defaults.
OPTIONS = {
    "fedmlh": dict(num_tables=2, num_buckets=20, hidden=(32,)),
    "fedavg": dict(hidden=(32,)),
    "fedss": dict(num_negatives=10, embed_dim=16, hidden=(32,)),
}


@functools.lru_cache(maxsize=2)
def dataset(seed: int) -> Dataset:
    """The synthetic data every process derives from the run's seed (made once per process)."""
    return load_dataset("synthetic", seed=seed, num_samples=1200, num_features=32, num_classes=50)


@functools.lru_cache(maxsize=4)
def shards(seed: int, n: int, held_out: bool) -> tuple:
    """The train (or test) rows of each of ``n`` clients (made once per process)."""
    ds = dataset(seed)
    part = ds.test if held_out else ds.train
    return tuple(iid_partition(part.indptr, part.indices, n, seed))


def strategy(ctx: Context) -> Strategy:
    name = str(ctx.run_config["strategy"])
    return make_strategy(name, **OPTIONS.get(name.lower(), {}))


def num_partitions(ctx: Context) -> int:
    """How many clients there are: the node's ``num-partitions`` (else the run config's ``num-clients``)."""
    return int(ctx.node_config.get("num-partitions", ctx.run_config["num-clients"]))


def _shard(ctx: Context, held_out: bool) -> ClientData:
    seed, n, cid = int(ctx.run_config["seed"]), num_partitions(ctx), partition_id(ctx)
    if cid >= n:
        raise ValueError(f"partition-id {cid} is not below num-partitions {n}")
    part = dataset(seed).test if held_out else dataset(seed).train
    return make_clients(part.x, [shards(seed, n, held_out)[cid]], dataset(seed).num_classes)[0]


def client_data(ctx: Context) -> ClientData:
    """This node's training shard."""
    return _shard(ctx, held_out=False)


def held_out(ctx: Context) -> ClientData:
    """This client's own held-out data (federated evaluation): its shard of the test split."""
    return _shard(ctx, held_out=True)


def flower_strategy(ctx: Context) -> FlowerStrategy:
    """The run's settings come from Flower's run_config (pyproject [tool.flwr.app.config], ``-c``)."""
    ds = dataset(int(ctx.run_config["seed"]))
    cfg = run_config_from(ctx, train=TrainConfig(epochs=2, batch_size=32, lr=0.01, optimizer="adam"))
    return FlowerStrategy(
        strategy(ctx),
        ds.num_features,
        ds.num_classes,
        int(ctx.run_config["num-clients"]),
        cfg,
        federated_evaluation=True,
    )


P1: list[dict] = []  # the centralised test P@1 per round (this ServerApp process runs one run)


def evaluate(server_round: int, strat: Strategy, state: State, ctx: Context) -> dict[str, float]:
    """Centralised evaluation on the test split the server holds."""
    test = dataset(int(ctx.run_config["seed"])).test
    p1 = precision_at_k(strat.predict_topk(state, test.x, 1), test.indptr, test.indices, 1)
    P1.append({"round": server_round, "P@1": p1})
    print(f"round {server_round}: test P@1 {p1:.3f}", flush=True)
    return {"P@1": p1}


def write_result(ctx: Context, fk: FlowerStrategy) -> None:
    if str(ctx.run_config["result-file"]):
        history = [
            {
                "round": h.round,
                "clients": h.clients,
                "failed": h.failed,
                "bytes_up": h.bytes_up,
                "bytes_down": h.bytes_down,
                "federated": {k: v for k, v in h.metrics.items() if k.startswith("fed-")},
            }
            for h in fk.history
        ]
        result = {"strategy": fk.strategy.name, "rounds": P1, "history": history}
        Path(str(ctx.run_config["result-file"])).write_text(json.dumps(result, indent=1))


server = server_app(flower_strategy, evaluate_fn=evaluate, on_done=write_result)
client = client_app(strategy, client_data, load_eval_data=held_out)
