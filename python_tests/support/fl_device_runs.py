"""Short runs of every registered algorithm, for the device tests: one small federated setting per
algorithm family (one label per client for FedAwS/FedALC, the client count for the network variant),
and what a run leaves behind (final state, round records, centralised and federated metrics)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedkernels.fl import ClientData, RunConfig, Server, TrainConfig
from fedkernels.fl.registry import make_strategy, strategies

from .fl_data import one_label_clients, tiny_clients, tiny_dataset

NUM_CLIENTS = 4
ONE_LABEL = ("fedaws", "fedalc", "fedalc-fixed")
# Options that keep each algorithm's run small (the emulator runs every kernel thread by thread).
SMALL: dict[str, dict] = {
    "fedavg": {"hidden": [8]},
    "fedmlh": {"num_tables": 2, "num_buckets": 2, "hidden": [8]},
    "fedss": {"hidden": [8], "embed_dim": 8, "num_negatives": 3},
    "fedss-negonly": {"hidden": [8], "embed_dim": 8, "num_negatives": 3},
    "fedss-posonly": {"hidden": [8], "embed_dim": 8},
    "fedss-fullsoftmax": {"hidden": [8], "embed_dim": 8},
    "fedaws": {"dim": 8, "hidden": [8], "k": 2},
    "fedalc": {"dim": 8, "hidden": [8], "k": 2, "client_secret": b"device-test-secret-0123"},
    "fedalc-fixed": {"dim": 8, "hidden": [8], "k": 2, "fixed_steps": 3, "client_secret": b"device-test-secret-0123"},
    "partialexchange": {"hidden": [8], "fraction": 0.5},
    "l1diff": {"gamma": 0.05},
    "l1diffnetwork": {"hidden": [8], "num_clients": NUM_CLIENTS, "k": 1},
}


def algorithm_names() -> list[str]:
    """Every registered algorithm (lower-case registry keys)."""
    return list(strategies())


@dataclass
class RunResult:
    """What a short run leaves: the final state (host tensors), the round records and the metrics."""

    state: dict[str, torch.Tensor]
    history: list
    metrics: dict[str, float]
    federated: dict[str, float]


def clients_for(name: str) -> list[ClientData]:
    """The clients of ``name``'s short run (one class each for FedAwS/FedALC)."""
    if name in ONE_LABEL:
        return one_label_clients(NUM_CLIENTS, per_client=12, num_features=6, num_classes=NUM_CLIENTS)
    return tiny_clients(NUM_CLIENTS, per_client=12, num_features=6, num_classes=5)


@dataclass
class Setting:
    """The data of one algorithm's short run (made before a test changes torch's default device)."""

    name: str
    clients: list[ClientData]
    test: ClientData


def setting(name: str) -> Setting:
    """``name``'s clients (one class each for FedAwS/FedALC) and a test set."""
    clients = clients_for(name)
    return Setting(name, clients, tiny_dataset(16, num_features=6, num_classes=clients[0].num_classes, seed=7))


def short_run(
    name: str, device: str = "cpu", rounds: int = 2, autocast: str = "off", optimizer: str = "adam"
) -> RunResult:
    """``rounds`` rounds of ``name`` with every client each round, then centralised and federated evaluation."""
    return run_setting(setting(name), device, rounds, autocast, optimizer)


def run_setting(
    s: Setting, device: str = "cpu", rounds: int = 2, autocast: str = "off", optimizer: str = "adam"
) -> RunResult:
    """:func:`short_run` on the data of ``s``, local training with ``optimizer``."""
    name, clients, test = s.name, s.clients, s.test
    num_classes = clients[0].num_classes
    config = RunConfig(
        rounds=rounds,
        clients_per_round=NUM_CLIENTS,
        train=TrainConfig(epochs=1, batch_size=8, lr=0.05, optimizer=optimizer, autocast=autocast),
        seed=1,
        eval_k=(1, 3),
        device=device,
    )
    options = SMALL.get(name, {})
    server = Server(make_strategy(name, **options), clients, 6, num_classes, config)
    server.run()
    metrics = server.evaluate(test)
    federated, _ = server.evaluate_federated(clients)
    state = {k: v.detach().to("cpu") for k, v in server.state.items()}
    return RunResult(state, server.history, metrics, federated)
