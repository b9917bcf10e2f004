"""The in-process server over a ClientStore: the same run, bit for bit, as over the eager list, without
ever holding more than its resident bound of clients."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch

from fedkernels.data.client_store import ClientStore, write_client_store
from fedkernels.fl import RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import FedAvg, FedAwS, PartialExchange
from fedkernels.fl.faults import FaultInjector
from fedkernels.fl.server import record_to_json
from python_tests.support.fl_data import one_label_clients, tiny_clients, tiny_dataset


def _config(**kw) -> RunConfig:
    base = {"rounds": 3, "clients_per_round": 3, "train": TrainConfig(epochs=1, batch_size=8, lr=0.2), "seed": 5}
    return RunConfig(**{**base, **kw})


def _store(tmp_path, clients, resident=2) -> ClientStore:
    write_client_store(tmp_path / "s", clients)
    return ClientStore(tmp_path / "s", max_resident=resident)


def _runs(strategy_fn, clients, store, **kw):
    out = []
    for data in (clients, store):
        s = Server(strategy_fn(), data, clients[0].x.shape[1], clients[0].num_classes, _config(**kw))
        s.run(test=clients[0])
        out.append(s)
    return out


def _assert_same_run(a: Server, b: Server) -> None:
    assert a.state.keys() == b.state.keys()
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    # records equal but for wall time
    strip = [{k: v for k, v in record_to_json(r).items() if k != "seconds"} for r in a.history]
    assert strip == [{k: v for k, v in record_to_json(r).items() if k != "seconds"} for r in b.history]


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("weighting", ["samples", "uniform"])
def test_fedavg_over_the_store_equals_the_list(tmp_path, batch, weighting):
    sizes = [12, 0, 20, 5, 9, 16, 3]  # an empty client among them
    clients = [tiny_dataset(n, seed=i) for i, n in enumerate(sizes)]
    a, b = _runs(
        lambda: FedAvg(hidden=(8,)), clients, _store(tmp_path, clients), batch_clients=batch, client_weighting=weighting
    )
    _assert_same_run(a, b)
    # at most the cohort (3 > the store's bound of 2) was ever materialised by the server
    assert b.local_clients.num_resident <= 3 and b.local_clients.made <= 3 * 3


def test_fedaws_batched_over_the_store_equals_the_list(tmp_path):
    clients = one_label_clients(6, per_client=10)
    a, b = _runs(lambda: FedAwS(dim=8, hidden=(8,)), clients, _store(tmp_path, clients), batch_clients=True)
    _assert_same_run(a, b)


def test_stateful_clients_keep_their_memory_through_eviction(tmp_path):
    clients = tiny_clients(7, per_client=12)
    a, b = _runs(
        lambda: PartialExchange(fraction=0.5, hidden=(8,), keep_unreceived=True),
        clients,
        _store(tmp_path, clients, resident=1),
        rounds=4,
    )
    _assert_same_run(a, b)
    for c in range(7):  # evicted clients got their kept tensors back when made again
        ma, mb = a.local_clients[c].memory, b.local_clients[c].memory
        assert (ma is None) == (mb is None)
        assert ma is None or all(torch.equal(ma[n], mb[n]) for n in ma)


def test_wrapped_endpoints_over_the_store(tmp_path):
    clients = tiny_clients(6, per_client=10)

    def run(data):
        inj = FaultInjector(crash=0.3, seed=2)
        s = Server(FedAvg(hidden=(8,)), data, 16, 8, _config(rounds=4), client_wrapper=inj.wrap)
        s.run()
        return s

    a, b = run(clients), run(_store(tmp_path, clients))
    assert any(r.failed for r in a.history)  # faults were injected
    _assert_same_run(a, b)


def test_checkpoint_resumes_across_list_and_store(tmp_path):
    clients = tiny_clients(5, per_client=10)
    store = _store(tmp_path, clients)
    ck = str(tmp_path / "ck.safetensors")
    first = Server(FedAvg(hidden=(8,)), clients, 16, 8, _config(rounds=2, checkpoint=ck))
    first.run()
    resumed = Server(FedAvg(hidden=(8,)), store, 16, 8, _config(rounds=4, checkpoint=ck))
    assert resumed.round == 2
    resumed.run()
    whole = Server(FedAvg(hidden=(8,)), clients, 16, 8, _config(rounds=4))
    whole.run()
    assert all(torch.equal(whole.state[k], resumed.state[k]) for k in whole.state)
    other = tiny_clients(5, per_client=10, seed=9)
    write_client_store(tmp_path / "other", other)
    with pytest.raises(ValueError, match="other data"):
        Server(FedAvg(hidden=(8,)), ClientStore(tmp_path / "other"), 16, 8, _config(rounds=4, checkpoint=ck))


def test_memory_grows_with_the_cohort_not_the_population(tmp_path):
    # 400 clients x 50 rows x 16 float32 features: 1.3 MB of features in the store
    clients = tiny_clients(400, per_client=50)
    write_client_store(tmp_path / "s", clients)
    population = sum(c.x.numel() * 4 + c.indices.numel() * 8 + c.indptr.numel() * 8 for c in clients)
    del clients
    store = ClientStore(tmp_path / "s", max_resident=4)
    tracemalloc.start()  # numpy's copies out of the mapped files are traced
    try:
        s = Server(FedAvg(hidden=(8,)), store, 16, 8, _config(rounds=3, clients_per_round=4))
        s.run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.local_clients.num_resident <= 4 and s.local_clients.made <= 12 and store.loads <= 12
    assert peak < population / 10
    assert isinstance(s.num_examples[399], int) and s.num_examples[399] == 50
    assert np.array_equal(store.num_examples, np.full(400, 50))


def test_federated_evaluation_reads_only_the_sampled_held_out_sets(tmp_path):
    clients, held = tiny_clients(8, per_client=10), tiny_clients(8, per_client=6, seed=3)
    write_client_store(tmp_path / "held", held)
    store = ClientStore(tmp_path / "held", max_resident=1)
    s = Server(FedAvg(hidden=(8,)), clients, 16, 8, _config(rounds=1, eval_clients=2))
    s.run()
    want, _ = s.evaluate_federated(held, round=0)
    got, _ = s.evaluate_federated(store, round=0)
    assert got == want and got
    assert store.loads <= 3  # client 0 (for its class count) and the round's 2 sampled clients
