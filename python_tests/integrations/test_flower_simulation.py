"""Flower's simulation engine (``flwr[simulation]``, Ray) with 100 virtual SuperNodes: FedAvg-family
training with 30% of the train replies hostile (crashes, empty, garbage, oversized and bomb arrays:
fedkernels.testing.flower_faults, through Flower's public ClientApp mods) and sampled federated
evaluation ends bit-identical to the in-process run in which the faulty clients send nothing, and
the protocol scales with the clients per round: each node is asked who it is once, and only the
round's clients and the evaluation sample get messages.

One simulation (Ray start-up dominates, and it is slow on the 2-core CI machine), so one test.
"""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")
pytest.importorskip("ray", reason="Flower's simulation engine needs Ray (pip install 'flwr[simulation]')")

import torch

from fedkernels.fl.checkpoint import load_checkpoint
from fedkernels.testing.flower_faults import KINDS, fault_of
from fedkernels.testing.flower_sim import Settings, apps, in_process_run

CLIENTS, PER_ROUND, ROUNDS, EVAL_CLIENTS, RATE = 100, 20, 2, 10, 0.3


def test_100_virtual_clients_match_in_process(tmp_path):
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    s = Settings(
        strategy="l1diff",  # codec streams: the bombs reach a real decoder
        num_clients=CLIENTS,
        clients_per_round=PER_ROUND,
        rounds=ROUNDS,
        seed=5,
        eval_clients=EVAL_CLIENTS,
        fault_rate=RATE,
        timeout=120.0,
        checkpoint=str(tmp_path / "run.ckpt"),
        result=str(tmp_path / "result.json"),
    )
    server, client = apps(s)
    backend = {
        "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
        "init_args": {"num_cpus": 2, "include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False},
    }
    run_simulation(server, client, num_supernodes=CLIENTS, backend_config=backend)

    out = json.loads((tmp_path / "result.json").read_text())
    ref = in_process_run(s)
    state, meta = load_checkpoint(s.checkpoint, ref.state)
    assert out["done"] and meta["round"] == ROUNDS
    assert all(state[k].dtype == ref.state[k].dtype and torch.equal(state[k], ref.state[k]) for k in ref.state)
    for got, want in zip(meta["history"], ref.history, strict=True):
        assert got["clients"] == want.clients and got["bytes_down"] == want.bytes_down
        assert [c for c, _ in got["failed"]] == [c for c, _ in want.failed]  # the faulty clients, no other
        assert got["metrics"] == want.metrics and len(want.metrics) == 9  # sampled federated P@k/nDCG@k/R@k
    faulty = [[c for c in h.clients if fault_of(s.seed, h.round, c, RATE)] for h in ref.history]
    assert sum(map(len, faulty)) >= 6, faulty
    reasons = {why.split(":")[0] for h in meta["history"] for _, why in h["failed"]}
    assert reasons <= {"crashed", "sent no upload", "rejected"} and "rejected" in reasons, reasons
    kinds = {fault_of(s.seed, h.round, c, RATE) for h in ref.history for c in h.clients} - {None}
    assert len(kinds) >= 4 and kinds <= set(KINDS), kinds
    # Messages scale with the clients per round: one identify per node, then only the chosen ones.
    assert out["joined"] == CLIENTS and out["messages"]["query.fedkernels_identify"] == CLIENTS
    assert out["messages"]["train"] == ROUNDS * PER_ROUND
    assert out["messages"]["evaluate"] == ROUNDS * EVAL_CLIENTS
