"""Cohort nodes on Flower's simulation engine (``flwr[simulation]``, Ray): 3 virtual SuperNodes serve
40 clients (a shard each, from the engine's partition-id / num-partitions), 16 a round, trained with the
batched pass on the nodes; the run ends bit-identical to the in-process batched run of the same seed,
with one identify message and one train message per node per round. One simulation (Ray's start-up
dominates on the 2-core CI machine), so one test."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray (pip install 'flwr[simulation]')")

import torch

from fedkernels.fl.checkpoint import load_checkpoint
from fedkernels.testing.flower_sim import Settings, apps, in_process_run

NODES, CLIENTS, PER_ROUND, ROUNDS = 3, 40, 16, 2


def test_cohort_nodes_on_the_simulation_engine_match_in_process(tmp_path):
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    s = Settings(
        num_clients=CLIENTS,
        clients_per_round=PER_ROUND,
        rounds=ROUNDS,
        seed=8,
        cohort=True,
        batch_clients=True,
        timeout=120.0,
        checkpoint=str(tmp_path / "run.ckpt"),
        result=str(tmp_path / "result.json"),
    )
    server, client = apps(s)
    backend = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": 2, "include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False},
    }
    run_simulation(server, client, num_supernodes=NODES, backend_config=backend)

    out = json.loads((tmp_path / "result.json").read_text())
    ref = in_process_run(s)  # one torch thread, as each simulation worker
    state, meta = load_checkpoint(s.checkpoint, ref.state)
    assert out["done"] and meta["round"] == ROUNDS
    assert all(state[k].dtype == ref.state[k].dtype and torch.equal(state[k], ref.state[k]) for k in ref.state)
    for got, want in zip(meta["history"], ref.history, strict=True):
        assert got["clients"] == want.clients and got["failed"] == [] == want.failed
        assert (got["bytes_down"], got["bytes_up"]) == (want.bytes_down, want.bytes_up)
    assert out["joined"] == NODES and out["messages"]["query.fedkernels_identify"] == NODES
    assert out["messages"]["train"] == ROUNDS * NODES  # 16 of 40 clients: every shard has some each round
