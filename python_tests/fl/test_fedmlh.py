"""FedMLH in the loop: round trips, byte accounting, reproducibility, per-table aggregation,
merged top-k prediction, learning on tiny data."""

from __future__ import annotations

import pytest
import torch

from fedkernels.fl import RunConfig, Server, TrainConfig, encode
from fedkernels.fl.algorithms.fedmlh import HASH_KEY, FedMLH
from fedkernels.fl.client import ROUND_TAG
from python_tests.support.fl_data import assert_seed_reproducible, assert_training_improves, tiny_clients, tiny_dataset

R, B = 3, 4


def _server(seed=0, rounds=3, **kw):
    cfg = RunConfig(rounds=rounds, clients_per_round=2, train=TrainConfig(epochs=1, batch_size=16, lr=0.3), seed=seed)
    return Server(FedMLH(num_tables=R, num_buckets=B, hidden=kw.pop("hidden", (8,)), **kw), tiny_clients(4), 16, 8, cfg)


def test_state_layout():
    s = _server()
    assert s.state[HASH_KEY].tolist()[:2] == [R, B]
    params = {k: v for k, v in s.state.items() if k != HASH_KEY}
    assert params and all(v.shape[0] == R for v in params.values())  # every parameter is per table
    assert s.strategy.model_bytes(s.state) == sum(v.numel() * 4 for v in params.values())


def test_round_trip_and_bytes():
    s = _server()
    sent = dict(s.state)
    rec = s.run_round()
    assert len(rec.clients) == 2 and not rec.failed
    up_one = len(
        encode({k: v for k, v in sent.items() if k != HASH_KEY}, metadata={ROUND_TAG: "0"})
    )  # uploads name their round
    assert rec.bytes_down == 2 * len(encode(sent)) and rec.bytes_up == 2 * up_one


def test_same_seed_bit_identical():
    assert_seed_reproducible(_server, constant=(HASH_KEY,))


def test_same_across_thread_counts():
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = _server(seed=5)
        a.run()
        torch.set_num_threads(2)
        b = _server(seed=5)
        b.run()
    finally:
        torch.set_num_threads(old)
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)


def test_aggregation_is_per_table_weighted_mean():
    s = _server()
    chosen = s.select_clients(0)
    ups = [s.run_client(c, 0)[0] for c in chosen]
    new = s.strategy.aggregate(s.state, ups, 0)
    w = [len(s.clients[c]) for c in chosen]
    assert torch.equal(new[HASH_KEY], s.state[HASH_KEY])
    for k in ups[0].payload:
        for j in range(R):
            want = sum(wi * u.payload[k][j].double() for wi, u in zip(w, ups, strict=True)) / sum(w)
            torch.testing.assert_close(new[k][j].double(), want, rtol=1e-6, atol=1e-7)


def test_hash_table_is_built_once_per_run(monkeypatch):
    """Client updates and evaluation batches reuse one head's p x R table (no re-hashing)."""
    from fedkernels.hashing import HashFamily

    calls = []
    real = HashFamily.table

    def counting(self, num_classes, *args, **kwargs):
        calls.append(num_classes)
        return real(self, num_classes, *args, **kwargs)

    monkeypatch.setattr(HashFamily, "table", counting)
    s = _server(rounds=2)
    s.run()
    test = tiny_dataset(30, seed=7)
    for _ in range(3):
        s.strategy.predict_topk(s.state, test.x, 3)
    assert len(calls) == 1


def test_loaded_heads_share_the_table_not_the_weights():
    s = _server(rounds=1)
    a, b = s.strategy._load(s.state), s.strategy._load(s.state)
    assert a.table.data_ptr() == b.table.data_ptr()
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert pa.data_ptr() != pb.data_ptr() and torch.equal(pa, pb)


def test_defaults_follow_the_paper_rule():
    # One rule for both (nn.default_hash_size: the FedMLH paper's pairs, R * B about p / 2 below
    # them): the strategy's head and a FedMLHHead built with no sizes agree.
    from fedkernels.nn import FedMLHHead, default_hash_size

    s = FedMLH()
    head = s._template(s.init_state(4, 300, 0)[HASH_KEY], 4)
    assert (head.num_tables, head.num_buckets) == default_hash_size(300) == (4, 37)
    plain = FedMLHHead(4, 300)
    assert (plain.num_tables, plain.num_buckets) == (4, 37)
    assert FedMLHHead(4, 300, num_tables=2).num_buckets == 75


def test_predict_topk_matches_head_scores():
    s = _server(rounds=2)
    s.run()
    test = tiny_dataset(30, seed=7)
    top = s.strategy.predict_topk(s.state, test.x, 3)
    head = s.strategy._load(s.state)
    scores = head.scores(test.x)  # [N, p], merged bucket scores
    assert top.shape == (30, 3) and top.dtype == torch.int64
    picked = scores.gather(1, top)
    assert torch.all(picked[:, :-1] >= picked[:, 1:])  # descending
    kth = picked[:, -1:]
    assert torch.all((scores > kth).sum(1) <= 2)  # nothing outside the top 3 scores higher


def test_training_improves_precision():
    s = _server(rounds=25, hidden=(16,))
    assert_training_improves(s, 0.1)


def test_fewer_bytes_than_fedavg_when_buckets_are_few():
    from fedkernels.fl import FedAvg

    p, f = 400, 16
    mlh = FedMLH(num_tables=2, num_buckets=20, hidden=(8,))
    avg = FedAvg(hidden=(8,))
    assert mlh.model_bytes(mlh.init_state(f, p, 0)) < avg.model_bytes(avg.init_state(f, p, 0))


def test_bad_options():
    with pytest.raises(ValueError, match="num_tables"):
        FedMLH(num_tables=0)
    with pytest.raises(ValueError, match="num_buckets"):
        FedMLH(num_buckets=1)
