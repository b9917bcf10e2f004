"""Cohort nodes over a ClientStore (fedkernels.integrations.flower.store_nodes): each node maps the
population's store (its folder from node_config or run_config) and reads only the round's sampled
clients of its shard. Fast, without processes (the in-memory grid, support/flower_grid.py): a cohort
run over a store ends bit-identical to the in-process Server over the same store and seed, through the
batched pass and the sequential loop, and each node reads exactly its sampled clients."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

from flwr.app import Context, RecordDict

from fedkernels.data.client_store import ClientStore, write_client_store
from fedkernels.fl import Server
from fedkernels.integrations.flower import STORE_KEY, CohortFlowerStrategy, StoreLoader, cohort_client_app
from fedkernels.testing.flower_sim import Settings, make_strategy, shard
from python_tests.support.flower_grid import MemoryGrid, task_identity

RUNS = iter(range(3000, 4000))


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    task_identity(monkeypatch)


@pytest.fixture
def store(tmp_path):
    s = Settings(num_clients=30)
    write_client_store(tmp_path / "store", (shard(c, s) for c in range(s.num_clients)), num_clients=s.num_clients)
    return tmp_path / "store"


def cohort_run(s: Settings, path, nodes: int, cache: int) -> tuple[CohortFlowerStrategy, list[StoreLoader]]:
    """``nodes`` cohort nodes over the store at ``path``: node 0 names it in its node_config, the others
    read it from run_config; each node has a loader of its own (as each has its process)."""
    run, apps, loaders = next(RUNS), {}, []
    for i in range(nodes):
        loader = StoreLoader()
        loaders.append(loader)
        app = cohort_client_app(lambda ctx: make_strategy(s), loader, cache_clients=cache)
        node_cfg: dict = {"partition-id": i, "num-partitions": nodes}
        run_cfg: dict = {}
        (node_cfg if i == 0 else run_cfg)[STORE_KEY] = str(path)
        apps[10 + i] = (app, Context(run, 10 + i, node_cfg, RecordDict(), run_cfg))
    fk = CohortFlowerStrategy(
        make_strategy(s), s.num_features, s.num_classes, s.num_clients, s.run_config(), startup_grace=0.0
    )
    fk.start(MemoryGrid(apps))
    return fk, loaders


def in_process(s: Settings, path) -> Server:
    cfg = dataclasses.replace(s.run_config(), checkpoint=None, client_timeout=None)
    server = Server(make_strategy(s), ClientStore(path, max_resident=4), s.num_features, s.num_classes, cfg)
    server.run()
    return server


@pytest.mark.parametrize(("batch", "nodes"), [(True, 3), (False, 2)])
def test_a_cohort_run_over_a_store_equals_the_in_process_run_over_it(store, batch, nodes):
    s = Settings(num_clients=30, clients_per_round=12, rounds=3, seed=4, batch_clients=batch)
    fk, loaders = cohort_run(s, store, nodes, cache=12)
    ref = in_process(s, store)
    assert all(fk.state[k].dtype == v.dtype and torch.equal(fk.state[k], v) for k, v in ref.state.items())
    for got, want in zip(fk.history, ref.history, strict=True):
        assert (got.clients, got.failed, got.bytes_up) == (want.clients, want.failed, want.bytes_up)
    assert all(len(loader.stores) == 1 for loader in loaders)  # each node mapped the store once


def test_a_node_reads_only_its_sampled_clients(store):
    """With its cache at one client, a node reads each of its sampled clients once per round it is
    sampled in (a client sampled two rounds running is read twice), and never another."""
    s = Settings(num_clients=30, clients_per_round=8, rounds=3, seed=6, batch_clients=True)
    fk, loaders = cohort_run(s, store, 2, cache=1)
    for i, loader in enumerate(loaders):
        lo, hi = 15 * i, 15 * (i + 1)
        mine = [[c for c in h.clients if lo <= c < hi] for h in fk.history]
        read = loader.stores[str(store)].loads
        assert read == loader.loads
        # each round's clients once, less at most the one client kept from the round before
        assert sum(map(len, mine)) - (len(mine) - 1) <= read <= sum(map(len, mine))
    assert sum(loader.loads for loader in loaders) < s.num_clients  # the population was never read whole


def test_a_loader_pickles_as_its_folder_and_names_a_missing_store(store, tmp_path):
    loader = StoreLoader(ClientStore(store))
    ctx = Context(1, 1, {}, RecordDict(), {})
    loader(ctx, 3)
    again = pickle.loads(pickle.dumps(loader))
    assert again.stores == {} and again.default == str(store)
    assert torch.equal(again(ctx, 3).x, shard(3, Settings(num_clients=30)).x)
    with pytest.raises(ValueError, match=STORE_KEY):
        StoreLoader()(ctx, 0)
    with pytest.raises(ValueError, match="index"):
        StoreLoader(tmp_path)(ctx, 0)  # a folder that is no store
