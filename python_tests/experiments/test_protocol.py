"""The papers' protocol knobs: uniform 1/S averaging, late-window means, split statistics, per-client
held-out evaluation, the centralised upper bound, the label prior, gamma relative to the run's g0 and
the retrieval metrics (MAP@R and the fixed-cutoff MAP@10)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data import Shard, split_statistics
from fedkernels.experiments.experiment import (
    RETRIEVAL_CUTOFF,
    ExperimentConfig,
    late_window_means,
    prepare_data,
    run_algorithm,
    run_centralized,
)
from fedkernels.fl import FedAvg, L1Diff, L1DiffNetwork, RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import LabelPrior
from fedkernels.fl.types import RoundRecord
from python_tests.reference.fl_ref import weighted_mean
from python_tests.reference.split_stats_ref import mean_pairwise_tv_ref
from python_tests.support.fl_data import tiny_clients, tiny_dataset


def _fedavg(weighting: str) -> Server:
    clients = tiny_clients(3)
    clients[1] = clients[1].rows(torch.arange(5))  # unequal sizes: the two weightings differ
    cfg = RunConfig(
        rounds=1, clients_per_round=3, train=TrainConfig(epochs=1, batch_size=8), client_weighting=weighting
    )
    return Server(FedAvg(hidden=(4,)), clients, 16, 8, cfg)


@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_client_weighting_is_the_weighted_mean(weighting):
    s = _fedavg(weighting)
    ups = [s.run_client(c, 0)[0] for c in range(3)]
    s.run_round()
    w = [float(len(s.clients[c])) if weighting == "samples" else 1.0 for c in range(3)]
    for name in s.state:
        want = weighted_mean([u.payload[name] for u in ups], w)
        torch.testing.assert_close(s.state[name].double(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="client_weighting"):
        Server(FedAvg(), tiny_clients(2), 16, 8, RunConfig(clients_per_round=1, client_weighting="median"))


def test_late_window_means():
    hist = [RoundRecord(r, [], [], 0, 0, {"P@1": float(r)} if r % 2 else {}) for r in range(10)]
    late = late_window_means(hist, 0.5, 10)  # rounds 5..9 evaluated at 5, 7, 9
    assert late["P@1"] == pytest.approx(7.0) and late["evaluations"] == 3.0
    assert late_window_means(hist, 0.01, 10)["P@1"] == 9.0  # at least the last evaluation


def test_split_statistics():
    mk = lambda rows, labels: Shard(np.array(rows), np.arange(len(labels) + 1), np.array(labels))  # noqa: E731
    same = [mk([0, 1], [0, 1]), mk([2, 3], [0, 1])]
    assert split_statistics(same, 2) == pytest.approx(
        {
            "clients": 2,
            "copies_per_sample": 1.0,
            "mean_pairwise_tv": 0.0,
            "mean_labels_per_client": 2.0,
            "max_label_share_per_client": 1.0,
        }
    )
    apart = [mk([0, 1], [0, 0]), mk([1, 2], [1, 1])]  # disjoint labels, sample 1 copied
    st = split_statistics(apart, 2)
    assert st["mean_pairwise_tv"] == pytest.approx(1.0) and st["copies_per_sample"] == pytest.approx(4 / 3)


def _cfg(**kw) -> ExperimentConfig:
    base = dict(
        dataset="synthetic",
        synthetic={"num_samples": 300, "num_features": 16, "num_classes": 20},
        partition="dirichlet",
        beta=0.5,
        clients=4,
        clients_per_round=4,
        rounds=2,
        local_epochs=1,
        batch_size=32,
    )
    return ExperimentConfig(**{**base, **kw})


def test_client_holdout_and_per_client_metrics():
    cfg = _cfg(client_test_fraction=0.25, algorithms=["FedAvg"])
    data = prepare_data(cfg)
    assert data.held_out is not None and len(data.held_out) == 4
    for tr, te in zip(data.clients, data.held_out, strict=True):
        assert len(te) == round(0.25 * (len(tr) + len(te)))
    res = run_algorithm("FedAvg", cfg, data)
    assert "client-P@1" in res["final"] and "P@1" in res["late"] and "P@1" in res["best"]
    assert data.split["clients"] == 4 and data.split["copies_per_sample"] == 1.0
    # every FedAvg client uses the global model: on the shared test set it scores the global P@k
    for k in (1, 3, 5):
        assert res["final"][f"client-shared-P@{k}"] == pytest.approx(res["final"][f"P@{k}"], abs=1e-7)


def test_partial_exchange_reports_the_papers_evaluation_beside_the_others():
    cfg = _cfg(client_test_fraction=0.25, algorithms=["PartialExchange"], ks=[1])
    data = prepare_data(cfg)
    res = run_algorithm("PartialExchange", cfg, data)
    assert {"P@1", "client-P@1", "client-shared-P@1", "client-shared-nDCG@1"} <= set(res["final"])
    rows = [r for r in res["history"] if r["metrics"]]
    assert all("client-shared-P@1" in r["metrics"] for r in rows)


def test_dirichlet_sample_partition_from_the_config():
    cfg = _cfg(partition="dirichlet_sample", sample_fraction=0.5, beta=0.3)
    data = prepare_data(cfg)
    n = len(data.dataset.train)
    assert [len(c) for c in data.clients] == [int(0.5 * n)] * 4
    assert data.split["copies_per_sample"] > 1.0  # clients overlap
    for bad in (0.0, 1.5, "0.5"):
        with pytest.raises(ValueError, match="sample_fraction"):
            _cfg(partition="dirichlet_sample", sample_fraction=bad).validate()


def test_centralized_upper_bound_trains_on_the_pooled_original_labels():
    cfg = _cfg(partition="one_label", algorithms=["FedAvg"], rounds=1)
    data = prepare_data(cfg)
    res = run_centralized("FedAvg", cfg, data)
    assert res["algorithm"] == "FedAvg (centralized)"
    assert [h["clients"] for h in res["history"]] == [[0]]  # one client
    assert res["history"][0]["bytes_up"] > 0


def test_label_prior_predicts_the_most_frequent_labels():
    clients = tiny_clients(3)
    s = Server(LabelPrior(), clients, 16, 8, RunConfig(rounds=1, clients_per_round=3))
    s.run_round()
    counts = torch.zeros(8)
    for c in clients:
        counts += torch.bincount(c.indices, minlength=8)
    top = s.strategy.predict_topk(s.state, torch.zeros(2, 16), 3)
    assert top[0].tolist() == torch.sort(-counts, stable=True).indices[:3].tolist()


@pytest.mark.parametrize("network", [False, True])
def test_gamma_rel_is_set_from_round_zero_gradients(network):
    clients = tiny_clients(4)
    strat = L1DiffNetwork(4, gamma_rel=0.5, hidden=(4,), k=1) if network else L1Diff(gamma_rel=0.5)
    s = Server(strat, clients, 16, 8, RunConfig(rounds=2, clients_per_round=4, train=TrainConfig(batch_size=64)))
    down = s.strategy.client_payload(s.state, 0, None, 0, 0)
    assert float(down["l1.gamma"][0]) == 0.0  # round 0: exact gradients
    ups = [s.run_client(c, 0)[0] for c in range(4)]
    s.run_round()
    n = [len(c) for c in clients]
    names = [k for k in ups[0].payload]
    mean_abs = sum(float(weighted_mean([u.payload[k] for u in ups], n).abs().sum()) for k in names) / sum(
        ups[0].payload[k].numel() for k in names
    )
    assert float(s.state["server.gamma"]) == pytest.approx(0.5 * mean_abs, rel=1e-5)
    assert float(s.strategy.client_payload(s.state, 0, None, 1, 0)["l1.gamma"][0]) == pytest.approx(0.5 * mean_abs)


def test_network_evaluated_per_client_with_its_own_head():
    clients = tiny_clients(4)
    strat = L1DiffNetwork(4, hidden=(4,), k=1, graph="kernel", p=float("inf"), lam=0.05)
    s = Server(strat, clients, 16, 8, RunConfig(rounds=2, clients_per_round=4, train=TrainConfig(batch_size=64)))
    s.run()
    held = [tiny_dataset(10, seed=50 + c) for c in range(4)]
    got = s.evaluate_clients(held)
    from fedkernels.metrics import ranking_metrics

    want, total = 0.0, 0
    for c, d in enumerate(held):
        top = strat.predict_topk_client(s.state, c, d.x, 1)
        want += len(d) * ranking_metrics(top, d.indptr, d.indices, (1,))["P@1"]
        total += len(d)
    assert got["P@1"] == pytest.approx(want / total)
    assert strat.options()["p"] == "inf"


@settings(max_examples=40, deadline=None)
@given(
    labels=st.lists(st.lists(st.integers(0, 7), max_size=12), max_size=7),
)
def test_split_statistics_tv_matches_the_dense_pairwise_reference(labels: list[list[int]]) -> None:
    shards = [
        Shard(np.arange(len(ix)), np.arange(len(ix) + 1), np.asarray(ix, np.int64), np.unique(np.asarray(ix, np.int64)))
        for ix in labels
    ]
    got = split_statistics(shards, 8)
    want = mean_pairwise_tv_ref([np.asarray(ix) for ix in labels], 8)
    assert got["mean_pairwise_tv"] == pytest.approx(want, abs=1e-12)
    want_labels = np.mean([len(set(ix)) for ix in labels]) if labels else 0.0
    assert got["mean_labels_per_client"] == pytest.approx(want_labels)


def test_split_statistics_at_a_huge_label_space_is_sparse() -> None:
    # one client per label at p = 312330: the dense histogram alone would be 10000 x 312330 floats
    shards = [
        Shard(np.asarray([c]), np.asarray([0, 1]), np.asarray([c * 31]), np.asarray([c * 31])) for c in range(10000)
    ]
    st_ = split_statistics(shards, 312330)
    assert st_["mean_pairwise_tv"] == pytest.approx(1.0) and st_["clients"] == 10000


def test_retrieval_reports_map_at_r_and_map_at_10_of_the_final_model():
    cfg = _cfg(algorithms=["FedSS"], retrieval=True, eval_every=1)
    data = prepare_data(cfg)
    res = run_algorithm("FedSS", cfg, data)
    for key in ("MAP@R", f"rMAP@{RETRIEVAL_CUTOFF}"):
        assert 0.0 <= res["final"][key] <= 1.0 and key in res["late"] and key in res["best"]
    assert RETRIEVAL_CUTOFF == 10  # the FedSS paper's cutoff
    plain = run_algorithm("FedSS", _cfg(algorithms=["FedSS"]), prepare_data(_cfg(algorithms=["FedSS"])))
    assert "MAP@R" not in plain["final"] and "rMAP@10" not in plain["final"]
