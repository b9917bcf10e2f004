"""FedSS and its variants in the loop: round trips, byte accounting, reproducibility, aggregation."""

from __future__ import annotations

import functools

import pytest
import torch

import fedkernels.fl.algorithms.fedss as fedss_mod
from fedkernels.fl import ClientResult, RunConfig, Server, TrainConfig, encode
from fedkernels.fl.algorithms import FedSS, FullSoftmax, NegOnly, PosOnly
from fedkernels.fl.client import ROUND_TAG
from fedkernels.fl.seeding import derive_seed
from python_tests.support.fl_data import assert_seed_reproducible, assert_training_improves, tiny_clients

VARIANTS = [FedSS, NegOnly, PosOnly, FullSoftmax]


def _server(cls=FedSS, seed=0, rounds=3, num_classes=8, **kw):
    cfg = RunConfig(rounds=rounds, clients_per_round=2, train=TrainConfig(epochs=1, batch_size=16, lr=0.3), seed=seed)
    strategy = cls(num_negatives=kw.pop("m", 2), embed_dim=8, hidden=(16,), **kw)
    return Server(strategy, tiny_clients(4, num_classes=num_classes), 16, num_classes, cfg)


@pytest.mark.parametrize("cls", VARIANTS)
def test_round_trip_and_bytes_equal_serialised_payloads(cls):
    s = _server(cls)
    chosen = s.select_clients(0)
    down = up = 0
    for c in chosen:  # the same pure functions the server calls, from the same state and seeds
        seed = derive_seed(s.config.seed, "client", 0, c)
        req = s.strategy.client_request(s.clients[c], 0, seed)
        up += len(encode(req)) if req is not None else 0
        payload = s.strategy.client_payload(s.state, c, req, 0, seed)
        down += len(encode(payload))
        up += len(
            encode(s.strategy.client_update(payload, s.clients[c], s.config.train, 0, seed), metadata={ROUND_TAG: "0"})
        )
    rec = s.run_round()
    assert rec.clients == chosen and not rec.failed
    assert rec.bytes_down == down and rec.bytes_up == up


def test_request_is_positives_plus_fresh_negatives():
    s = _server(FedSS, m=3)
    data = s.clients[0]
    req = s.strategy.client_request(data, 0, 5)
    pos = torch.unique(data.indices)
    k = int(req["num_positives"][0])
    assert k == pos.numel() and torch.equal(req["class_ids"][:k], pos)
    neg = req["class_ids"][k:]
    assert neg.numel() == min(3, 8 - k) and not set(neg.tolist()) & set(pos.tolist())
    assert PosOnly(embed_dim=8).client_request(data, 0, 5)["class_ids"].numel() == k
    assert FullSoftmax(embed_dim=8).client_request(data, 0, 5) is None


def test_sampled_variants_download_less_than_full():
    small, full = _server(FedSS, num_classes=200, m=4), _server(FullSoftmax, num_classes=200)
    assert small.run_round().bytes_down < full.run_round().bytes_down


@pytest.mark.parametrize("cls", VARIANTS)
def test_same_seed_bit_identical(cls):
    assert_seed_reproducible(functools.partial(_server, cls))


def _hand_uploads(state):
    _, d = state["classes"].shape
    body = [k for k in state if k != "classes"]
    g = torch.Generator().manual_seed(0)

    def upload(ids):
        out = {k: torch.randn(state[k].shape, generator=g) for k in body}
        out["class_ids"] = torch.tensor(ids)
        out["rows"] = torch.randn(len(ids), d, generator=g)
        return out

    ups = [upload([1, 4, 6]), upload([4, 2]), upload([6, 4, 7])]
    counts = [10, 30, 20]
    return body, ups, counts, [ClientResult(i, u, n, 0) for i, (u, n) in enumerate(zip(ups, counts, strict=True))]


@pytest.mark.parametrize("rule", ["algorithm1", "senders"])
def test_aggregation_matches_hand_computed(rule):
    s = _server(FedSS, row_aggregation=rule)
    state = s.state
    body, ups, counts, results = _hand_uploads(state)
    new = s.strategy.aggregate(state, results, 0)
    old, want = state["classes"], state["classes"].clone()
    if rule == "algorithm1":  # each client's update over the round's 60 examples (the paper's line 12)
        want[1] = old[1] + 10 * (ups[0]["rows"][0] - old[1]) / 60
        want[2] = old[2] + 30 * (ups[1]["rows"][1] - old[2]) / 60
        want[4] = (
            old[4]
            + (
                10 * (ups[0]["rows"][1] - old[4])
                + 30 * (ups[1]["rows"][0] - old[4])
                + 20 * (ups[2]["rows"][1] - old[4])
            )
            / 60
        )
        want[6] = old[6] + (10 * (ups[0]["rows"][2] - old[6]) + 20 * (ups[2]["rows"][0] - old[6])) / 60
        want[7] = old[7] + 20 * (ups[2]["rows"][2] - old[7]) / 60
    else:  # each row over its senders' examples
        want[1] = ups[0]["rows"][0]
        want[2] = ups[1]["rows"][1]
        want[4] = (10 * ups[0]["rows"][1] + 30 * ups[1]["rows"][0] + 20 * ups[2]["rows"][1]) / 60
        want[6] = (10 * ups[0]["rows"][2] + 20 * ups[2]["rows"][0]) / 30
        want[7] = ups[2]["rows"][2]
    torch.testing.assert_close(new["classes"], want)
    assert torch.equal(new["classes"][[0, 3, 5]], state["classes"][[0, 3, 5]])  # rows nobody sent: same bits
    for k in body:
        torch.testing.assert_close(new[k], sum(n * u[k] for n, u in zip(counts, ups, strict=True)) / 60)


def test_row_aggregation_is_an_option_and_the_default_is_algorithm_1():
    assert FedSS().row_aggregation == "algorithm1" and FedSS().options()["row_aggregation"] == "algorithm1"
    assert FullSoftmax(row_aggregation="senders").options()["row_aggregation"] == "senders"
    with pytest.raises(ValueError, match="row_aggregation"):
        FedSS(row_aggregation="mean")


def test_hot_paths_use_the_compiled_ops(monkeypatch):
    calls = {"sample_negatives": 0, "scatter_rows_mean": 0, "masked_weighted_average": 0, "linear_cross_entropy": 0}
    import fedkernels.fl.aggregate as aggregate_mod
    import fedkernels.nn.sampled_softmax as head_mod

    def counting(module, name):
        real = getattr(module, name)

        def wrapper(*a, **k):
            calls[name] += 1
            return real(*a, **k)

        monkeypatch.setattr(module, name, wrapper)

    counting(fedss_mod, "sample_negatives")
    counting(aggregate_mod, "scatter_rows_mean")
    counting(aggregate_mod, "masked_weighted_average")
    counting(head_mod, "linear_cross_entropy")
    _server(FedSS).run_round()
    assert all(v > 0 for v in calls.values()), calls


@pytest.mark.parametrize("cls", [FedSS, FullSoftmax])
def test_training_improves_precision(cls):
    s = _server(cls, rounds=25, m=3)
    assert_training_improves(s, 0.1)


def test_bad_config():
    with pytest.raises(ValueError, match="num_negatives"):
        FedSS(num_negatives=-1)
    with pytest.raises(ValueError, match="embed_dim"):
        FedSS(embed_dim=0)
