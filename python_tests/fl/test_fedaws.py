"""FedAwS, FedALC and FedALC-fixed in the loop: round trips, bytes, reproducibility, aggregation."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

import fedkernels
from fedkernels.fl import ClientData, RunConfig, Server, TrainConfig, encode
from fedkernels.fl.algorithms import FedALC, FedALCFixed, FedAwS
from fedkernels.fl.algorithms.fedaws import FIXED_W, class_pair_weights, client_class, pair_weights_of
from fedkernels.fl.client import ROUND_TAG
from fedkernels.fl.types import ClientResult
from python_tests.reference import spread_ref
from python_tests.support.fl_data import assert_seed_reproducible, tiny_dataset

NUM_CLASSES = 6


def one_label_clients(n: int = 240, seed: int = 0) -> list[ClientData]:
    """Client c holds every sample labelled c, relabelled with c alone (a sample with several labels
    appears at several clients, as in the one-label-per-client partition)."""
    data = tiny_dataset(n, num_classes=NUM_CLASSES, seed=seed)
    clients = []
    for c in range(NUM_CLASSES):
        rows = [i for i in range(n) if c in data.indices[data.indptr[i] : data.indptr[i + 1]].tolist()]
        x = data.x[torch.tensor(rows)]
        clients.append(ClientData(x, torch.arange(len(rows) + 1), torch.full((len(rows),), c), NUM_CLASSES))
    return clients


def _server(cls=FedAwS, seed=0, rounds=2, **kw):
    cfg = RunConfig(rounds=rounds, clients_per_round=3, train=TrainConfig(epochs=1, batch_size=16, lr=0.1), seed=seed)
    if cls is not FedAwS:  # the clients' secret: same secret and seed, same run (the seed alone cannot give it)
        kw.setdefault("client_secret", b"test clients' shared secret")
    strategy = (
        cls(dim=8, hidden=(16,), k=3, **kw)
        if cls is not FedALCFixed
        else cls(dim=8, hidden=(16,), k=3, fixed_steps=30, **kw)
    )
    return Server(strategy, one_label_clients(), 16, NUM_CLASSES, cfg)


@pytest.mark.parametrize("cls", [FedAwS, FedALC, FedALCFixed])
def test_round_trip_and_bytes(cls):
    s = _server(cls)
    rec = s.run_round()
    assert len(rec.clients) == 3 and not rec.failed
    g = {n: t for n, t in s.state.items() if n.startswith("g.")}
    down = sum(len(encode({**{n: t for n, t in g.items()}, "w": torch.zeros(8)})) for _ in rec.clients)
    req = len(encode({"class_id": torch.zeros(1, dtype=torch.int64)}))
    up_model = {**g} if cls is FedALCFixed else {**g, "w": torch.zeros(8)}
    assert rec.bytes_down == down
    assert rec.bytes_up == 3 * (req + len(encode(up_model, metadata={ROUND_TAG: "0"})))  # uploads name their round
    test = tiny_dataset(100, num_classes=NUM_CLASSES, seed=9)
    metrics = s.evaluate(test)
    assert 0.0 <= metrics["P@1"] <= 1.0


@pytest.mark.parametrize("cls", [FedAwS, FedALC, FedALCFixed])
def test_same_seed_bit_identical(cls):
    assert_seed_reproducible(functools.partial(_server, cls))


def test_fedaws_aggregation_matches_hand_reference():
    s = _server(FedAwS, spread_lr=0.5, margin=1.5)
    chosen = s.select_clients(0)
    ups = [s.run_client(c, 0)[0] for c in chosen]
    new = s.strategy.aggregate(s.state, ups, 0)
    n = [float(u.num_examples) for u in ups]
    for name in (k for k in new if k.startswith("g.")):
        want = sum(w * u.payload[name].double() for w, u in zip(n, ups, strict=True)) / sum(n)
        torch.testing.assert_close(new[name].double(), want, rtol=1e-6, atol=1e-7)
    # one client per class here: the class rows are replaced by the uploads, then one spreadout step
    W = s.state["W"].double().clone()
    for c, u in zip(chosen, ups, strict=True):
        W[client_class(s.clients[c])] = u.payload["w"].double()
    Wg = W.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(spread_ref.spreadout_loss(Wg, 1.5, 3, None, "l2"), Wg)
    want_W = F.normalize(W - 0.5 * grad, dim=1)
    torch.testing.assert_close(new["W"].double(), want_W, rtol=1e-5, atol=1e-6)


def test_two_clients_of_one_class_average_by_samples():
    s = _server(FedAwS, spread_lr=0.0)
    g = {n: t for n, t in s.state.items() if n.startswith("g.")}
    row2 = {"class_id": torch.tensor([2])}  # what check_upload adds: the row each client asked for
    ups = [
        ClientResult(0, {**g, "w": torch.ones(8), **row2}, 1, 0),
        ClientResult(1, {**g, "w": torch.zeros(8), **row2}, 3, 0),
    ]
    new = s.strategy.aggregate(s.state, ups, 0)
    torch.testing.assert_close(new["W"][2], F.normalize(torch.full((8,), 0.25), dim=0))


def test_fedalc_pair_weights_match_plain_counts():
    clients = one_label_clients()
    pw, nbytes = class_pair_weights(clients, b"k" * 32, NUM_CLASSES)
    # plain reference: instances are feature rows; count and co-occurrence by exact row equality
    sets: dict[bytes, set[int]] = {}
    for cl in clients:
        for i in range(len(cl)):
            sets.setdefault(cl.x[i].numpy().tobytes(), set()).add(client_class(cl))
    count = torch.zeros(NUM_CLASSES)
    cooc = torch.zeros(NUM_CLASSES, NUM_CLASSES)
    for labs in sets.values():
        for a in labs:
            count[a] += 1
            for b in labs - {a}:
                cooc[a, b] += 1
    want = torch.where(cooc > 0, 1 - cooc / count.clamp_min(1)[:, None], torch.ones(()))
    torch.testing.assert_close(pw.dense(), want)
    assert pw.nnz == int((cooc > 0).sum()) > 0
    assert nbytes > sum(len(c) for c in clients) * 64  # 64 digest bytes per pair, plus headers


def test_fedalc_fixed_uses_learned_embeddings_and_keeps_them():
    s = _server(FedALCFixed)
    fixed = s.state[FIXED_W].clone()
    s.run()
    assert torch.equal(s.state["W"], fixed)
    torch.testing.assert_close(fixed.norm(dim=1), torch.ones(NUM_CLASSES))


def test_rejects_multi_label_client():
    data = tiny_dataset(50, num_classes=NUM_CLASSES, seed=1)
    with pytest.raises(ValueError, match="one label per client"):
        client_class(data)


def test_spreadout_step_uses_compiled_op(monkeypatch):
    calls = []
    real = fedkernels.ops.spread.spreadout_loss
    monkeypatch.setattr(
        "fedkernels.fl.algorithms.fedaws.spreadout_loss", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    _server(FedALC).run_round()
    assert calls


def test_embed_mlp_is_embedding_then_relu_linears():
    from fedkernels.fl.models import embed_mlp

    m = embed_mlp(20, 8, embed_dim=12, hidden=(10, 6), seed=3)
    lin = [layer for layer in m if isinstance(layer, torch.nn.Linear)]
    assert [(layer.in_features, layer.out_features) for layer in lin] == [(20, 12), (12, 10), (10, 6), (6, 8)]
    assert lin[0].bias is None  # a bag-of-words embedding: no bias, no activation after it
    x = torch.randn(5, 20)
    e = x @ lin[0].weight.T
    h = torch.relu(lin[1](e))
    h = torch.relu(lin[2](h))
    torch.testing.assert_close(m(x), lin[3](h))
    assert torch.equal(embed_mlp(20, 8, 12, (10, 6), seed=3)[0].weight, lin[0].weight)  # seeded
    with pytest.raises(ValueError, match="embed_dim"):
        embed_mlp(20, 8, embed_dim=0)


def test_embed_model_runs_and_reproduces():
    s = _server(FedAwS, model="embed", embed_dim=12)
    assert s.state["g.0.weight"].shape == (12, 16) and "g.0.bias" not in s.state
    assert_seed_reproducible(functools.partial(_server, FedAwS, model="embed", embed_dim=12))
    assert 0.0 <= s.evaluate(tiny_dataset(60, num_classes=NUM_CLASSES, seed=9))["P@1"] <= 1.0


@pytest.mark.parametrize("bad", [{"model": "cnn"}, {"pull": -1.0}])
def test_rejects_bad_model_options(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        FedAwS(**bad)


def test_fedalc_pull_step_matches_hand_reference():
    """FedALC with ``pull``: one step on ``spreadout(W; alpha) + pull * sum (1 - alpha) ||w_c - w_c'||^2``."""
    s = _server(FedALC, spread_lr=0.5, margin=1.5, pull=0.3)
    alpha = pair_weights_of(s.state).dense().double()
    assert bool((alpha < 1).any())  # some pairs co-occur: the pull acts
    W = s.state["W"].double().clone().requires_grad_(True)
    stored = alpha < 1
    pull = ((1 - alpha) * stored * torch.cdist(W, W).pow(2)).sum()
    loss = spread_ref.spreadout_loss(W, 1.5, 3, alpha, "l2") + 0.3 * pull
    (grad,) = torch.autograd.grad(loss, W)
    want = F.normalize(W.detach() - 0.5 * grad, dim=1)
    got = s.strategy._spread(s.state["W"].clone(), pair_weights_of(s.state))
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    s.strategy.pull = 0.0
    assert not torch.allclose(
        s.strategy._spread(s.state["W"].clone(), pair_weights_of(s.state)).double(), want, atol=1e-4
    )
