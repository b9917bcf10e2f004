"""The synthetic XC population: deterministic, block-independent, power-law labels, well-formed clients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data.client_store import ClientStore
from fedkernels.data.fingerprint import add_client, new_fingerprint
from fedkernels.data.xc_population import BLOCK, PopulationSpec, class_weights, population_block, write_xc_population
from fedkernels.fl.algorithms.fedaws import client_class


def _write(tmp_path, name, **kw) -> ClientStore:
    write_xc_population(tmp_path / name, PopulationSpec(**kw))
    return ClientStore(tmp_path / name)


def test_same_seed_same_store_other_seed_other(tmp_path):
    small = {"num_clients": 300, "num_classes": 1000, "num_features": 256}
    a, b = _write(tmp_path, "a", **small), _write(tmp_path, "b", **small)
    c = _write(tmp_path, "c", seed=1, **small)
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert (tmp_path / "a" / "x_indices.bin").read_bytes() == (tmp_path / "b" / "x_indices.bin").read_bytes()


def test_a_block_does_not_depend_on_the_population_size(tmp_path):
    small = {"num_classes": 500, "num_features": 128}
    short, long = (
        _write(tmp_path, "s", num_clients=BLOCK, **small),
        _write(tmp_path, "l", num_clients=BLOCK + 7, **small),
    )
    h_short, h_long = new_fingerprint(0), new_fingerprint(0)
    for c in range(0, BLOCK, 97):
        add_client(h_short, short[c])
        add_client(h_long, long[c])
    assert h_short.hexdigest() == h_long.hexdigest()


@settings(max_examples=10, deadline=None)
@given(
    num_clients=st.integers(1, 40),
    min_examples=st.integers(0, 2),
    mean_extra=st.floats(0.0, 4.0),
    one_label=st.booleans(),
    classes=st.integers(1, 4),
    features=st.integers(1, 9),
)
def test_clients_are_well_formed(tmp_path_factory, num_clients, min_examples, mean_extra, one_label, classes, features):
    spec = PopulationSpec(
        num_clients=num_clients,
        num_classes=50,
        num_features=32,
        min_examples=min_examples,
        mean_examples=min_examples + mean_extra,
        one_label=one_label,
        classes_per_client=classes,
        features_per_example=features,
    )
    path = tmp_path_factory.mktemp("pop") / "s"
    write_xc_population(path, spec)
    store = ClientStore(path)
    assert len(store) == num_clients and store.num_classes == 50 and store.num_features == 32
    assert (store.num_examples >= min_examples).all()
    for c, d in enumerate(store):
        assert len(d) == store.num_examples[c] and d.x.layout == torch.sparse_csr and d.x.dtype == torch.float32
        lens = d.indptr.diff()
        assert (lens >= 1).all() and len(torch.unique(d.indices)) <= classes + int(lens.sum())
        key = torch.repeat_interleave(torch.arange(len(d)), lens) * 50 + d.indices  # labels distinct per row
        assert len(torch.unique(key)) == len(key)
        nnz = d.x.crow_indices().diff()
        assert (nnz >= 1).all() and (nnz <= features).all()
        if len(d):
            norms = torch.sqrt(torch.zeros(len(d)).index_add_(0, _rows(d.x), d.x.values() ** 2))
            assert torch.allclose(norms, torch.ones(len(d)))
        if one_label and len(d):
            client_class(d)  # raises unless every row holds exactly the client's one class


def _rows(x: torch.Tensor) -> torch.Tensor:
    return torch.repeat_interleave(torch.arange(x.shape[0]), x.crow_indices().diff())


def test_clients_classes_follow_the_power_law():
    spec = PopulationSpec(num_clients=8 * BLOCK, num_classes=100_000, one_label=True, exponent=1.0)
    cdf = np.cumsum(class_weights(spec))
    classes = np.concatenate(
        [
            y[np.concatenate([[0], np.cumsum(rows)[:-1]])[rows > 0]]
            for rows, _, ip, y in (population_block(spec, b, cdf) for b in range(8))
        ]
    )
    assert len(classes) == 8 * BLOCK  # min_examples 1: every client has its class
    # the reference: rank r has probability (r + 1)^-1 / H_p; which class has rank r follows from the weights
    w = class_weights(spec)
    by_rank = np.argsort(-w, kind="stable")
    H = sum(1.0 / (r + 1) for r in range(spec.num_classes))
    n = len(classes)
    for r in range(10):
        q = 1.0 / ((r + 1) * H)
        got = int((classes == by_rank[r]).sum())
        assert abs(got - n * q) < 5 * math.sqrt(n * q * (1 - q)), (r, got, n * q)
    # and the tail is spread: most clients' classes are outside the top 1000 ranks, as the law says
    tail = 1.0 - sum(1.0 / (r + 1) for r in range(1000)) / H
    got_tail = float(np.isin(classes, by_rank[1000:]).mean())
    assert abs(got_tail - tail) < 5 * math.sqrt(tail * (1 - tail) / n)


@pytest.mark.parametrize(
    "field, value",
    [("num_clients", 0), ("num_classes", 1.5), ("mean_examples", -1.0), ("client_share", 2.0), ("exponent", 11.0)],
)
def test_bad_spec_names_the_field(tmp_path, field, value):
    with pytest.raises(ValueError, match=field):
        write_xc_population(tmp_path / "s", PopulationSpec(**{field: value}))
