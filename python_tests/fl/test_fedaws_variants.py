"""FedAwS / FedALC variants of the papers: the unhinged -d^2 regulariser, the unnormalised count - cooc
weights, the papers' FedAvg and FedAvg-fixed baselines, the kNN-alpha diagnostics and FedALC's
correlation-placed initial embeddings (the ablation of its cause)."""

from __future__ import annotations

import pytest
import torch

from fedkernels.fl import ClientData, FedALC, FedAvgFixed, FedAvgPositive, FedAwS, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms.fedaws import INIT_W, ROW_SCALE, FedALCFixed, class_pair_weights, pair_weights_of
from fedkernels.nn.spreadout import spreadout_objective
from fedkernels.ops.spread import PairWeights
from python_tests.reference.fl_ref import spread_objective
from python_tests.support.fl_data import one_label_clients

SECRET = b"0123456789abcdef"


@pytest.mark.parametrize("form", ["hinge", "unhinged"])
@pytest.mark.parametrize("weighted", [False, True])
def test_objective_and_gradient_match_reference(form, weighted):
    g = torch.Generator().manual_seed(1)
    W = torch.nn.functional.normalize(torch.randn(9, 4, generator=g, dtype=torch.float64), dim=1)
    pw = PairWeights.from_pairs(torch.tensor([0, 0, 3]), torch.tensor([1, 5, 2]), torch.tensor([0.2, 0.7, 0.0]), 9)
    scale = torch.arange(1.0, 10.0, dtype=torch.float64)
    a = W.clone().requires_grad_(True)
    got = spreadout_objective(a, 3, 1.2, pw if weighted else None, scale if weighted else None, form)
    b = W.clone().requires_grad_(True)
    want = spread_objective(b, 3, 1.2, pw.dense().double() if weighted else None, scale if weighted else None, form)
    torch.testing.assert_close(got, want)
    got.backward()
    want.backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_unhinged_pushes_every_neighbour_hinge_only_close_ones():
    W = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)  # pairwise distances >= 1.41
    a = W.clone().requires_grad_(True)
    spreadout_objective(a, 1, 1.0, form="hinge").backward()
    assert torch.count_nonzero(a.grad) == 0  # every pair beyond the margin: the hinge is flat
    b = W.clone().requires_grad_(True)
    spreadout_objective(b, 1, 1.0, form="unhinged").backward()
    assert torch.count_nonzero(b.grad) > 0


def _server(cls, **kw):
    cfg = RunConfig(rounds=2, clients_per_round=4, train=TrainConfig(epochs=1, batch_size=8, lr=0.1), seed=0)
    return Server(cls(dim=4, hidden=(8,), k=2, **kw), one_label_clients(5), 16, 8, cfg)


def test_counts_weights_scale_rows_by_count():
    s = _server(FedALC, client_secret=SECRET, weights="counts")
    clients = s.clients
    pw, _ = class_pair_weights([c for c in clients], SECRET, 8, s.strategy._permutation(8)[0])
    counts = s.state[ROW_SCALE]
    rows = s.strategy._permutation(8)[0]
    for c, data in enumerate(clients):  # count(c) at class c's server row
        assert float(counts[rows[c % 8]]) == len(data)
    torch.testing.assert_close(pair_weights_of(s.state).values, pw.values)  # alpha itself stays the ratio
    s.run()  # the scaled server step runs


def test_paper_baselines():
    s = _server(FedAvgPositive)
    w0 = s.state["W"].clone()
    s.run()
    assert s.strategy.spread_steps == 0 and not torch.equal(s.state["W"], w0)  # averaged, never spread
    with pytest.raises(ValueError, match="spread_steps"):
        FedAvgPositive(spread_steps=1)
    f = _server(FedAvgFixed)
    w0 = f.state["W"].clone()
    rec = f.run_round()
    assert torch.equal(f.state["W"], w0) and not rec.failed  # fixed at the random initialisation
    assert f.strategy.setup_report(f.clients[0]) is None  # no label-set collection


def test_knn_alpha_diagnostics():
    s = _server(FedALC, client_secret=SECRET)
    d = s.strategy.diagnostics(s.state)
    assert set(d) == {"knn_pairs_alpha_below_0.9", "knn_pairs_mean_alpha", "all_pairs_mean_alpha"}
    # one label per client and one client per label here: no pair co-occurs, every alpha is 1
    assert d["knn_pairs_alpha_below_0.9"] == 0.0 and d["all_pairs_mean_alpha"] == pytest.approx(1.0)
    assert FedAwS().options()["regularizer"] == "hinge"
    with pytest.raises(ValueError, match="regularizer"):
        FedAwS(regularizer="cubic")
    with pytest.raises(ValueError, match="weights"):
        FedALC(weights="log")


def test_str_secret_is_its_utf8_bytes():
    # a preset (TOML has no bytes) gives the secret as a str: the same run as its UTF-8 bytes
    a = _server(FedALC, client_secret=SECRET.decode("utf-8"))
    b = _server(FedALC, client_secret=SECRET)
    a.run()
    b.run()
    for name in b.state:
        torch.testing.assert_close(a.state[name], b.state[name], rtol=0, atol=0)
    with pytest.raises((TypeError, ValueError)):
        FedALC(client_secret=123)  # type: ignore[arg-type]


def _correlated_clients():
    # clients 0 and 1 hold the same 20 instances (labels 0 and 1 always together); 2, 3, 4 their own
    clients = one_label_clients(5)
    clients[1] = ClientData(clients[0].x.clone(), clients[1].indptr, clients[1].indices, clients[1].num_classes)
    return clients


def _init_server(init: str) -> Server:
    cfg = RunConfig(rounds=2, clients_per_round=5, train=TrainConfig(epochs=1, batch_size=8, lr=0.1), seed=0)
    strategy = FedALC(dim=4, hidden=(8,), k=2, margin=1.414, client_secret=SECRET, init=init)
    return Server(strategy, _correlated_clients(), 16, 8, cfg)


def test_cooc_init_starts_round_0_from_correlation_placed_embeddings():
    s, plain = _init_server("cooc"), _init_server("random")
    rows = s.strategy._permutation(8)[0]
    init = s.state[INIT_W]
    assert init.shape == (8, 4) and pair_weights_of(s.state).nnz > 0
    torch.testing.assert_close(init.norm(dim=1), torch.ones(8))
    dist = torch.cdist(init, init)
    r0, r1 = int(rows[0]), int(rows[1])
    others = [int(rows[c]) for c in range(2, 8)]
    assert dist[r0, r1] < dist[r0, others].min()  # the co-occurring pair sits closest
    assert s.strategy.diagnostics(s.state)["knn_pairs_alpha_below_0.9"] > 0  # its weights act from round 0
    # clients download their rows of the initial embeddings
    req = s.strategy.client_request(s.clients[0], 0, 0)
    torch.testing.assert_close(s.strategy.client_payload(s.state, 0, req, 0, 0)["w"], init[r0])
    # round 0 is the random-init strategy's round from W = the initial embeddings; then they are dropped
    ups = [s.run_client(c, 0)[0] for c in s.select_clients(0)]
    want = plain.strategy.aggregate({**s.state, "W": init.clone(), INIT_W: init[:0]}, ups, 0)
    got = s.strategy.aggregate(s.state, ups, 0)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0)
    assert got[INIT_W].numel() == 0
    s.run()
    assert s.state[INIT_W].numel() == 0 and not torch.equal(s.state["W"], plain.state["W"])


def test_init_option_is_checked():
    assert FedALC(client_secret=SECRET).options()["init"] == "random"
    assert FedALC(client_secret=SECRET, init="cooc").options()["init"] == "cooc"
    with pytest.raises(ValueError, match="init"):
        FedALC(client_secret=SECRET, init="kmeans")
    with pytest.raises(ValueError, match="fixed"):
        FedALCFixed(client_secret=SECRET, init="cooc")
    with pytest.raises(ValueError, match="private"):
        FedALC(client_secret=SECRET, init="cooc").private_form()
