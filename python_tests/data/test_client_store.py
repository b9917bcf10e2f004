"""The client store: a population written once and served lazily gives back exactly the eager list,
keeps its resident bound, and refuses corrupt files with a clear error."""

from __future__ import annotations

import gc
import json
import pickle
import weakref
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data.client_store import ClientStore, ClientStoreWriter, write_client_store
from fedkernels.data.types import ClientData
from fedkernels.fl.data_identity import data_fingerprint


def _client(n: int, F: int, p: int, sparse: bool, dtype: torch.dtype, idx: torch.dtype, seed: int) -> ClientData:
    g = torch.Generator().manual_seed(seed)
    x = ((torch.rand(n, F, generator=g) < 0.4) * torch.randn(n, F, generator=g)).to(dtype)
    lens = torch.randint(0, 4, (n,), generator=g)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(lens, 0)
    indices = torch.randint(0, p, (int(lens.sum()),), generator=g)
    if sparse:
        csr = x.to_sparse_csr()
        x = torch.sparse_csr_tensor(
            csr.crow_indices().to(idx), csr.col_indices().to(idx), csr.values(), size=(n, F), check_invariants=True
        )
    return ClientData(x, indptr, indices, p)


def _population(sizes, F=6, p=5, sparse=True, dtype=torch.float32, idx=torch.int64) -> list[ClientData]:
    return [_client(n, F, p, sparse, dtype, idx, seed=i) for i, n in enumerate(sizes)]


def _same(a: ClientData, b: ClientData) -> bool:
    if a.x.layout != b.x.layout or a.num_classes != b.num_classes or a.x.shape != b.x.shape:
        return False
    if a.x.layout == torch.sparse_csr:
        parts = [(getattr(a.x, f)(), getattr(b.x, f)()) for f in ("crow_indices", "col_indices", "values")]
    else:
        parts = [(a.x, b.x)]
    parts += [(a.indptr, b.indptr), (a.indices, b.indices)]
    return all(u.dtype == v.dtype and u.shape == v.shape and torch.equal(u, v) for u, v in parts)


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 6), min_size=1, max_size=7),
    sparse=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    idx=st.sampled_from([torch.int32, torch.int64]),
    resident=st.integers(0, 3),
)
def test_store_gives_back_the_eager_list(tmp_path_factory, sizes, sparse, dtype, idx, resident):
    clients = _population(sizes, sparse=sparse, dtype=dtype, idx=idx)
    path = tmp_path_factory.mktemp("store") / "s"
    write_client_store(path, clients)
    store = ClientStore(path, max_resident=resident)
    assert len(store) == len(clients) and store.num_classes == 5 and store.num_features == 6
    assert store.num_examples.tolist() == [len(c) for c in clients]
    assert all(_same(a, b) for a, b in zip(clients, store, strict=True))  # iteration
    assert all(_same(clients[c], store[c]) for c in reversed(range(len(clients))))  # random access, cached
    assert _same(clients[-1], store[-1]) and all(_same(a, b) for a, b in zip(clients[1:], store[1:], strict=True))
    # the fingerprint written with the store is the eager list's (a checkpoint resumes across them)
    assert store.fingerprint == data_fingerprint(clients) == data_fingerprint(store)
    assert store.verify_fingerprint()


def test_one_client_and_all_empty(tmp_path):
    one = _population([3])
    write_client_store(tmp_path / "one", one)
    assert _same(ClientStore(tmp_path / "one")[0], one[0])
    empty = _population([0, 0], sparse=False)
    write_client_store(tmp_path / "empty", empty)
    s = ClientStore(tmp_path / "empty")
    assert s.num_examples.tolist() == [0, 0] and _same(s[1], empty[1])
    assert s.fingerprint == data_fingerprint(empty)


def test_resident_bound_and_lru_order(tmp_path):
    clients = _population([2] * 12)
    write_client_store(tmp_path / "s", clients)
    store = ClientStore(tmp_path / "s", max_resident=3)
    rng = np.random.default_rng(0)
    lru: OrderedDict[int, None] = OrderedDict()  # the reference LRU: its misses are the store's loads
    misses, alive = 0, []
    for c in rng.integers(0, 12, 200).tolist():
        if c in lru:
            lru.move_to_end(c)
        else:
            misses += 1
            lru[c] = None
            if len(lru) > 3:
                lru.popitem(last=False)
        got = store[c]
        alive.append(weakref.ref(got))
        assert _same(got, clients[c]) and store.resident <= 3
    del got
    gc.collect()
    assert store.loads == misses and list(store._cache) == list(lru)
    assert len({id(r()) for r in alive if r() is not None}) <= 3  # nothing else keeps a client materialised


def test_iteration_keeps_nothing(tmp_path):
    write_client_store(tmp_path / "s", _population([1] * 5))
    store = ClientStore(tmp_path / "s", max_resident=2)
    refs = [weakref.ref(d) for d in store]
    gc.collect()
    assert store.resident == 0 and all(r() is None for r in refs)


def test_writer_refuses_bad_input(tmp_path):
    clients = _population([2, 1])
    with pytest.raises(ValueError, match="num_clients is 3 but 2"):
        write_client_store(tmp_path / "a", clients, num_clients=3)
    with pytest.raises(ValueError, match="more than num_clients"):
        write_client_store(tmp_path / "b", iter(clients), num_clients=1)
    mixed = [clients[0], _population([2], sparse=False)[0]]
    with pytest.raises(ValueError, match="one feature layout"):
        write_client_store(tmp_path / "c", mixed)
    with pytest.raises(ValueError, match="not empty"):
        write_client_store(tmp_path / "c", clients)
    bad = ClientData(clients[0].x, clients[0].indptr, clients[0].indices.clamp(max=0) + 9, 5)
    with pytest.raises(ValueError, match=r"label ids must lie in \[0, 5\)"):
        write_client_store(tmp_path / "d", [bad])
    with pytest.raises(ValueError, match="num_clients must be"):
        ClientStoreWriter(tmp_path / "e", -1, 3, 3)


def _written(tmp_path: Path, sparse=True) -> Path:
    path = tmp_path / "s"
    write_client_store(path, _population([3, 2, 4], sparse=sparse))
    return path


def _edit_index(path: Path, **fields) -> None:
    meta = json.loads((path / "index.json").read_text())
    meta.update(fields)
    (path / "index.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"format": "other"}, "not a fedkernels-client-store-v1 index"),
        ({"num_rows": -1}, "num_rows must be an int"),
        ({"num_rows": 2**40}, r"y_indptr.bin holds \d+ bytes, the index says"),  # before any mapping
        ({"num_clients": "3"}, "num_clients must be an int"),
        ({"layout": "coo"}, "layout must be"),
        ({"x_dtype": "float16"}, "x_dtype must be"),
        ({"fingerprint": "zz"}, "fingerprint must be 64"),
        ({"y_nnz": 1}, r"y_indices.bin holds \d+ bytes"),
    ],
)
def test_corrupt_index_is_refused(tmp_path, fields, match):
    path = _written(tmp_path)
    _edit_index(path, **fields)
    with pytest.raises(ValueError, match=match):
        ClientStore(path)


def test_unreadable_index_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"no readable index\.json"):
        ClientStore(tmp_path)
    path = _written(tmp_path)
    (path / "index.json").write_bytes(b"{" * 10)
    with pytest.raises(ValueError, match="not JSON"):
        ClientStore(path)
    (path / "index.json").write_bytes(b" " * (1 << 17))
    with pytest.raises(ValueError, match="larger than 65536 bytes"):
        ClientStore(path)


def test_truncated_or_missing_file_is_refused(tmp_path):
    path = _written(tmp_path)
    raw = (path / "x_values.bin").read_bytes()
    (path / "x_values.bin").write_bytes(raw[:-4])
    with pytest.raises(ValueError, match=r"x_values\.bin holds"):
        ClientStore(path)
    (path / "x_values.bin").unlink()
    with pytest.raises(ValueError, match=r"x_values\.bin is missing"):
        ClientStore(path)


def _poke(path: Path, name: str, dtype, pos: int, value: int) -> None:
    a = np.fromfile(path / name, dtype=dtype)
    a[pos] = value
    a.tofile(path / name)


def test_corrupt_pointers_and_ids_are_refused_per_client(tmp_path):
    path = _written(tmp_path)
    _poke(path, "clients.bin", np.int64, 1, 7)  # offsets go 0, 7, 5: decreasing
    with pytest.raises(ValueError, match=r"clients\.bin's row offsets"):
        ClientStore(path)
    _poke(path, "clients.bin", np.int64, 1, 3)  # restored
    _poke(path, "y_indptr.bin", np.int64, 4, -5)  # inside client 1's rows
    store = ClientStore(path)
    assert _same(store[0], _population([3, 2, 4])[0])  # the other clients still load
    with pytest.raises(ValueError, match=r"client 1's row pointers in y_indptr.bin"):
        store[1]
    path = _written(tmp_path / "b")
    labels = np.fromfile(path / "y_indices.bin", dtype=np.int64)
    _poke(path, "y_indices.bin", np.int64, len(labels) - 1, 99)
    with pytest.raises(ValueError, match=r"client 2 has label ids outside \[0, 5\)"):
        ClientStore(path)[2]
    path = _written(tmp_path / "c")
    cols = np.fromfile(path / "x_indices.bin", dtype=np.int64)
    _poke(path, "x_indices.bin", np.int64, len(cols) - 1, 1 << 40)
    with pytest.raises(ValueError, match=r"column ids outside \[0, 6\)"):
        ClientStore(path).load(2)


def test_pickles_as_its_path(tmp_path):
    clients = _population([2, 3])
    write_client_store(tmp_path / "s", clients)
    store = ClientStore(tmp_path / "s", max_resident=1)
    store[0]
    raw = pickle.dumps(store)
    assert len(raw) < 500  # the path and the bound, not the mapped arrays
    back = pickle.loads(raw)
    assert back.max_resident == 1 and back.resident == 0 and _same(back[1], clients[1])


def test_index_type_checks(tmp_path):
    write_client_store(tmp_path / "s", _population([1, 1]))
    store = ClientStore(tmp_path / "s")
    with pytest.raises(IndexError, match="client 2 out of range"):
        store[2]
    with pytest.raises(TypeError, match="must be an int"):
        store[1.0]  # type: ignore[index]
    with pytest.raises(ValueError, match="max_resident"):
        ClientStore(tmp_path / "s", max_resident=-1)
