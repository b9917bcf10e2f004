"""Sparse features from file to model: the CSR row helpers, the loader's ``sparse=True``, partitions,
and training on sparse input giving the model the dense input gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data import hash_features, iid_partition, load_xc_dataset, make_clients, to_client_data
from fedkernels.fl import RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import FedAvg, FedMLH, FedSS
from fedkernels.fl.types import ClientData
from fedkernels.sparse_rows import csr_from_scipy, is_sparse_csr, select_rows, slice_rows
from python_tests.support.paths import ROOT
from python_tests.support.real_data import dataset

RCV1SUB1 = dataset("rcv1sub1")


def _random_csr(n: int, f: int, density: float, seed: int) -> sp.csr_matrix:
    return sp.random(n, f, density=density, format="csr", random_state=seed, dtype=np.float32)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 12),
    f=st.integers(1, 9),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
    picks=st.lists(st.integers(0, 11), max_size=15),
)
def test_select_rows_matches_dense(n, f, density, seed, picks):
    m = _random_csr(n, f, density, seed)
    x = csr_from_scipy(m)
    dense = torch.from_numpy(m.toarray())
    idx = torch.tensor([i for i in picks if i < n], dtype=torch.int64)
    got = select_rows(x, idx)
    assert is_sparse_csr(got) and tuple(got.shape) == (idx.numel(), f)
    assert torch.equal(got.to_dense(), dense[idx])
    assert torch.equal(select_rows(dense, idx), dense[idx])
    for lo, hi in [(0, n), (1, 3), (2, 100), (5, 2)]:
        assert torch.equal(slice_rows(x, lo, hi).to_dense(), dense[lo:hi])


def test_select_rows_out_of_range():
    x = csr_from_scipy(_random_csr(4, 3, 0.5, 0))
    with pytest.raises(IndexError, match="row index out of range"):
        select_rows(x, torch.tensor([4]))
    with pytest.raises(IndexError, match="row index out of range"):
        select_rows(x, torch.tensor([-1]))


def test_client_data_rows_keep_sparse():
    m = _random_csr(6, 5, 0.4, 1)
    labels = sp.csr_matrix(np.eye(6, 3, dtype=np.float32))
    cd = to_client_data(m, labels)
    assert is_sparse_csr(cd.x) and len(cd) == 6
    sub = cd.rows(torch.tensor([5, 0, 0]))
    assert is_sparse_csr(sub.x)
    assert torch.equal(sub.x.to_dense(), torch.from_numpy(m.toarray())[[5, 0, 0]])
    shards = iid_partition(cd.indptr, cd.indices, 2, seed=0)
    clients = make_clients(cd.x, shards, 3)
    for s, c in zip(shards, clients, strict=True):
        assert is_sparse_csr(c.x)
        assert torch.equal(c.x.to_dense(), torch.from_numpy(m.toarray())[s.rows])


def test_hash_features_sparse_equals_dense():
    m = _random_csr(30, 50, 0.2, 2)
    for l2 in (False, True):
        dense = hash_features(m, 16, seed=3, l2_normalize=l2)
        sparse = hash_features(m, 16, seed=3, l2_normalize=l2, sparse=True)
        assert is_sparse_csr(sparse)
        torch.testing.assert_close(sparse.to_dense(), dense, rtol=1e-6, atol=1e-7)


def test_load_sparse_equals_dense(tmp_path):
    """The sparse loader gives the dense loader's features (idf and L2 included), as CSR."""
    from fedkernels.data import XCData, write_xc

    m = _random_csr(40, 25, 0.15, 4)
    labels = sp.csr_matrix((np.random.default_rng(0).random((40, 7)) < 0.3).astype(np.float32))
    write_xc(XCData(m, labels), tmp_path / "all.txt")
    for tfidf in (False, True):
        d = load_xc_dataset(tmp_path, tfidf=tfidf)
        s = load_xc_dataset(tmp_path, tfidf=tfidf, sparse=True)
        for a, b in ((d.train, s.train), (d.test, s.test)):
            assert is_sparse_csr(b.x) and not is_sparse_csr(a.x)
            torch.testing.assert_close(b.x.to_dense(), a.x, rtol=1e-6, atol=1e-7)
            assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
        assert s.num_features == 25


@pytest.mark.real_data("rcv1sub1")
def test_rcv1sub1_sparse_load_memory_bound():
    """Loading rcv1sub1 (6.8 MB, 6000 x 47236) sparse raises a fresh process's peak RSS by under
    256 MiB (dense, its training features alone are 4800 x 47236 x 4 B = 865 MiB, 4.7 GB at peak)."""
    code = textwrap.dedent(
        f"""
        import json, resource, torch
        from fedkernels.data import load_xc_dataset
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ds = load_xc_dataset({str(RCV1SUB1)!r}, sparse=True)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"kib": after - before, "sparse": ds.train.x.layout == torch.sparse_csr,
                          "shape": list(ds.train.x.shape), "n_test": len(ds.test)}}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["sparse"] and r["shape"] == [4800, 47236] and r["n_test"] == 1200
    assert r["kib"] < 256 * 1024, f"loading rcv1sub1 sparse took {r['kib'] / 1024:.0f} MiB"


def _tiny(seed: int) -> tuple[list[ClientData], list[ClientData], ClientData, ClientData]:
    rng = np.random.default_rng(seed)
    m = _random_csr(60, 40, 0.1, seed)
    labels = sp.csr_matrix((rng.random((60, 12)) < 0.2).astype(np.float32))
    sparse, dense = to_client_data(m, labels), to_client_data(torch.from_numpy(m.toarray()), labels)
    shards = iid_partition(dense.indptr, dense.indices, 3, seed=seed)
    return make_clients(sparse.x, shards, 12), make_clients(dense.x, shards, 12), sparse, dense


@pytest.mark.parametrize(
    "make",
    [
        lambda: FedAvg(hidden=()),
        lambda: FedAvg(hidden=(8,)),
        lambda: FedMLH(num_tables=3, num_buckets=5, hidden=()),
        lambda: FedMLH(num_tables=2, num_buckets=4, hidden=(8,)),
        lambda: FedSS(num_negatives=3, embed_dim=6, hidden=(8,)),
    ],
    ids=["fedavg-linear", "fedavg-mlp", "fedmlh-linear", "fedmlh-mlp", "fedss"],
)
def test_training_sparse_equals_dense(make):
    """Two rounds of 3 clients on sparse features give the model dense features give (float tolerance),
    and the same predictions on the sparse and dense test features."""
    sp_clients, dn_clients, sp_all, dn_all = _tiny(5)
    cfg = RunConfig(rounds=2, clients_per_round=3, train=TrainConfig(epochs=2, batch_size=8, lr=0.1), seed=7)
    servers = []
    for clients in (sp_clients, dn_clients):
        server = Server(make(), clients, 40, 12, cfg)
        for _ in range(2):
            server.run_round()
        servers.append(server)
    a, b = servers[0].state, servers[1].state
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)
    ea = servers[0].evaluate(sp_all, ks=(1, 3))
    eb = servers[1].evaluate(dn_all, ks=(1, 3))
    assert ea == pytest.approx(eb, abs=1e-6)


def test_dense_only_paths_refuse_sparse_clearly():
    """FedALC's label-set digests and the feature-space graph hash dense rows: sparse input is a TypeError."""
    from fedkernels.fl.algorithms.fedaws import class_pair_weights
    from fedkernels.fl.algorithms.l1diff_network import L1DiffNetwork

    sp_clients, _, _, _ = _tiny(1)
    with pytest.raises(TypeError, match=r"clients: .*dense"):
        class_pair_weights(sp_clients, b"k" * 32, 12)
    with pytest.raises(TypeError, match=r"clients: .*dense"):
        L1DiffNetwork(num_clients=3, graph="features").setup(sp_clients, 0)
