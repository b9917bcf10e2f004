"""The loop with FedAvg: round trips, byte accounting, reproducibility, aggregation."""

from __future__ import annotations

import pytest
import torch

from fedkernels.fl import FedAvg, PayloadError, RunConfig, Server, TrainConfig, encode
from fedkernels.fl.algorithms.fedavg import weighted_average
from fedkernels.fl.client import ROUND_TAG
from python_tests.support.fl_data import assert_seed_reproducible, assert_training_improves, tiny_clients


def _server(seed=0, rounds=3, **kw):
    cfg = RunConfig(rounds=rounds, clients_per_round=2, train=TrainConfig(epochs=1, batch_size=16, lr=0.3), seed=seed)
    return Server(FedAvg(hidden=(8,), **kw), tiny_clients(4), 16, 8, cfg)


def test_round_trip_and_bytes():
    s = _server()
    rec = s.run_round()
    assert len(rec.clients) == 2 and not rec.failed
    one = len(encode(s.state))  # FedAvg sends the whole state each way; uploads also name their round
    assert rec.bytes_down == 2 * one and rec.bytes_up == 2 * len(encode(s.state, metadata={ROUND_TAG: "0"}))


def test_same_seed_bit_identical():
    assert_seed_reproducible(_server)


def test_aggregation_is_weighted_mean():
    s = _server()
    chosen = s.select_clients(0)
    ups = [s.run_client(c, 0)[0] for c in chosen]
    new = s.strategy.aggregate(s.state, ups, 0)
    w = [len(s.clients[c]) for c in chosen]
    for k in new:
        want = sum(wi * u.payload[k].double() for wi, u in zip(w, ups, strict=True)) / sum(w)
        torch.testing.assert_close(new[k].double(), want, rtol=1e-6, atol=1e-7)


def test_training_improves_precision():
    s = _server(rounds=25)
    assert_training_improves(s, 0.1)


def test_rejected_upload_leaves_state(monkeypatch):
    s = _server()
    old = {k: v.clone() for k, v in s.state.items()}
    monkeypatch.setattr(s.strategy, "client_update", lambda *a, **k: {"bogus": torch.zeros(1)})
    rec = s.run_round()
    assert len(rec.failed) == 2 and all("rejected" in why for _, why in rec.failed)
    assert all(torch.equal(old[k], s.state[k]) for k in old)


def test_weighted_average_errors():
    with pytest.raises(ValueError, match="weights"):
        weighted_average([{"a": torch.ones(1)}], [0.0])


def test_bad_config():
    with pytest.raises(ValueError, match="clients_per_round"):
        Server(FedAvg(), tiny_clients(2), 16, 8, RunConfig(clients_per_round=3))
    with pytest.raises(ValueError, match="loss"):
        FedAvg(loss="hinge")


def test_payload_rejects_garbage():
    from fedkernels.fl import decode

    with pytest.raises(PayloadError, match="safetensors"):
        decode(b"\x00\x01garbage")
