"""FedSS in its paper's regime: cosine logits, server momentum, the FedAwS baseline, retrieval MAP@R
and the many-small-clients split."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fedkernels.data import primary_label_partition, split_statistics
from fedkernels.fl import FedSS, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import PosOnlySpread
from fedkernels.metrics import map_at_r
from fedkernels.nn import SampledSoftmaxHead
from python_tests.reference import fl_ref
from python_tests.support.fl_data import tiny_clients


@settings(max_examples=15)
@given(n=st.integers(2, 12), d=st.integers(1, 4), seed=st.integers(0, 10_000))
@example(n=5, d=4, seed=1)  # a GEMM put the tied duplicate rows one ulp apart (the larger index won)
@example(n=9, d=4, seed=3)
def test_map_at_r_matches_the_loop(n, d, seed):
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n, d))
    emb[0] = emb[-1]  # a tie
    labels = [set(rng.choice(5, size=rng.integers(0, 3), replace=False).tolist()) for _ in range(n)]
    indptr = torch.tensor(np.cumsum([0] + [len(s) for s in labels]))
    indices = torch.tensor([v for s in labels for v in sorted(s)], dtype=torch.int64)
    got = map_at_r(torch.tensor(emb), indptr, indices, block=3)
    assert got == pytest.approx(fl_ref.map_at_r(emb, labels), abs=1e-12)


def test_cosine_head_is_scaled_cosine_softmax():
    g = torch.Generator().manual_seed(0)
    h, w = torch.randn(5, 3, generator=g), torch.randn(4, 3, generator=g)
    head = SampledSoftmaxHead(w, torch.arange(4), 4, 4, "full", scale=20.0, cosine=True)
    target = torch.tensor([0, 1, 2, 3, 1])
    logits = 20.0 * torch.nn.functional.normalize(h, dim=1) @ torch.nn.functional.normalize(w, dim=1).T
    torch.testing.assert_close(head(h, target), torch.nn.functional.cross_entropy(logits, target))


def _server(strategy, rounds=2):
    cfg = RunConfig(rounds=rounds, clients_per_round=3, train=TrainConfig(epochs=1, batch_size=16), seed=0)
    return Server(strategy, tiny_clients(3), 16, 8, cfg)


def test_server_momentum_is_fedavgm():
    plain, mom = _server(FedSS(hidden=(4,), embed_dim=4)), _server(FedSS(hidden=(4,), embed_dim=4, server_momentum=0.9))
    x0 = {k: v.clone() for k, v in mom.state.items() if not k.startswith("server.")}
    plain.run_round()
    mom.run_round()  # round 0: v = delta, the same step as plain averaging
    for k in x0:
        torch.testing.assert_close(mom.state[k], plain.state[k])
    x1 = {k: mom.state[k].clone() for k in x0}
    v1 = {k: mom.state["server.momentum." + k].clone() for k in x0}
    ups = [mom.run_client(c, 1)[0] for c in range(3)]
    avg = FedSS.aggregate(FedSS(hidden=(4,), embed_dim=4), {k: x1[k] for k in x0}, ups, 1)
    mom.run_round()
    for k in x0:  # x2 = x1 + 0.9 v1 + (avg - x1)
        torch.testing.assert_close(mom.state[k], x1[k] + 0.9 * v1[k] + (avg[k] - x1[k]), rtol=1e-5, atol=1e-6)
    assert mom.strategy.model_bytes(mom.state) == plain.strategy.model_bytes(plain.state)


def test_fedaws_baseline_spreads_the_class_rows():
    s = _server(PosOnlySpread(hidden=(4,), embed_dim=4, cosine=True, scale=20.0, margin=1.5, k=2, spread_lr=0.5))
    s.run()
    rows = s.state["classes"]
    torch.testing.assert_close(rows.norm(dim=1), torch.ones(rows.shape[0]))  # renormalised after the step
    assert s.strategy.name == "FedSS-FedAwS" and s.strategy.variant == "posonly"
    emb = s.strategy.embed(s.state, torch.randn(3, 16))
    torch.testing.assert_close(emb.norm(dim=1), torch.ones(3))


def test_primary_label_partition_many_small_clients():
    # label 0 is the most frequent (4 samples), so sample 3 ({0, 2}) goes with it; sample 5 has no label
    indptr = np.array([0, 2, 3, 4, 6, 7, 7])
    indices = np.array([0, 1, 0, 0, 2, 0, 2])
    shards = primary_label_partition(indptr, indices, 3, client_size=2, seed=0)
    assert [len(s) for s in shards] == [2, 2, 1]  # label 0's four samples in two clients, label 2's one
    assert sorted(np.concatenate([s.rows for s in shards]).tolist()) == [0, 1, 2, 3, 4]
    st = split_statistics(shards, 3)
    assert st["copies_per_sample"] == 1.0 and st["clients"] == 3
    with pytest.raises(ValueError, match="client_size"):
        primary_label_partition(indptr, indices, 3, client_size=0)
