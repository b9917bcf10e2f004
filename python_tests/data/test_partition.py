"""Partitioners' invariants and the synthetic generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedkernels.data import (
    dirichlet_partition,
    dirichlet_sample_partition,
    fedmlh_partition,
    frequent_classes,
    iid_partition,
    label_counts,
    make_clients,
    one_label_per_client,
    synthetic_multilabel,
)
from python_tests.reference.data_ref import dirichlet_sample_ref
from python_tests.support.helpers import csr_from_lists


def _labels_of(shard, i):
    return shard.indices[shard.indptr[i] : shard.indptr[i + 1]].tolist()


def _row_labels(indptr, indices, r):
    return indices[indptr[r] : indptr[r + 1]].tolist()


label_sets = st.integers(1, 12).flatmap(
    lambda p: st.tuples(
        st.just(p), st.lists(st.lists(st.integers(0, p - 1), max_size=4, unique=True), min_size=1, max_size=40)
    )
)


@given(label_sets, st.integers(1, 6), st.integers(0, 15), st.integers(0, 2**32))
def test_fedmlh_partition_invariants(lp, num_clients, num_frequent, seed):
    p, labels = lp
    indptr, indices = csr_from_lists(labels)
    ip, ix = indptr.numpy(), indices.numpy()
    shards = fedmlh_partition(indptr, indices, p, num_clients, num_frequent, seed)
    assert len(shards) == num_clients
    freq = set(frequent_classes(indptr, indices, p, num_frequent).tolist())
    owned = [set(s.classes.tolist()) for s in shards]
    # frequent classes are disjoint across clients and every one is owned
    assert sum(len(o) for o in owned) == len(set().union(*owned)) == len(freq)
    assert set().union(*owned) == freq
    holders = {r: [c for c, s in enumerate(shards) if r in s.rows.tolist()] for r in range(len(labels))}
    for r, lab in enumerate(labels):
        want = sorted({c for c, o in enumerate(owned) if o & set(lab)})
        if want:  # a sample goes exactly to the owners of its frequent classes
            assert holders[r] == want
        else:  # otherwise to exactly one client
            assert len(holders[r]) == 1
    for s in shards:  # copies keep all their labels
        assert np.all(np.diff(s.rows) > 0)
        for i, r in enumerate(s.rows):
            assert _labels_of(s, i) == _row_labels(ip, ix, r)
    # reproducible
    again = fedmlh_partition(indptr, indices, p, num_clients, num_frequent, seed)
    assert all(np.array_equal(a.rows, b.rows) for a, b in zip(shards, again, strict=True))


def test_frequent_classes_ties_and_empty():
    indptr, indices = csr_from_lists([[0, 1], [1, 2], [2], [3]])  # counts 1, 2, 2, 1, 0
    assert frequent_classes(indptr, indices, 5, 2).tolist() == [1, 2]
    assert frequent_classes(indptr, indices, 5, 3).tolist() == [0, 1, 2]  # tie 0 vs 3 -> smaller id
    assert frequent_classes(indptr, indices, 5, 10).tolist() == [0, 1, 2, 3]  # class 4 has no sample
    assert label_counts(indptr, indices, 5).tolist() == [1, 2, 2, 1, 0]


@given(label_sets, st.integers(1, 6), st.integers(0, 2**32))
def test_iid_covers_every_sample_once(lp, num_clients, seed):
    _, labels = lp
    indptr, indices = csr_from_lists(labels)
    shards = iid_partition(indptr, indices, num_clients, seed)
    rows = np.concatenate([s.rows for s in shards])
    assert sorted(rows.tolist()) == list(range(len(labels)))
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1


@given(label_sets, st.integers(1, 4), st.sampled_from([0.05, 0.5, 5.0]), st.integers(0, 2**32))
def test_dirichlet_covers_every_sample_once(lp, num_clients, beta, seed):
    p, labels = lp
    indptr, indices = csr_from_lists(labels)
    if num_clients > len(labels):
        with pytest.raises(ValueError, match="min_size"):
            dirichlet_partition(indptr, indices, p, num_clients, beta, seed)
        return
    try:
        shards = dirichlet_partition(indptr, indices, p, num_clients, beta, seed)
    except ValueError as e:  # tiny data and tiny beta can fail the min-size rule: it must say so
        assert "Dirichlet" in str(e)
        return
    rows = np.concatenate([s.rows for s in shards])
    assert sorted(rows.tolist()) == list(range(len(labels)))
    assert min(len(s) for s in shards) >= 1


def test_dirichlet_skew_grows_as_beta_shrinks():
    d = synthetic_multilabel(3000, 8, 20, labels_per_sample=1, exponent=0.5, seed=2)

    def skew(beta):  # mean over clients of the share of its most common primary label
        shards = dirichlet_partition(d.indptr, d.indices, 20, 5, beta, seed=1)
        return np.mean([np.bincount(s.indices, minlength=20).max() / len(s) for s in shards])

    assert skew(0.05) > skew(100.0) + 0.2


@given(label_sets)
def test_one_label_per_client(lp):
    p, labels = lp
    indptr, indices = csr_from_lists(labels)
    shards = one_label_per_client(indptr, indices, p)
    present = sorted({c for lab in labels for c in lab})
    assert [int(s.classes[0]) for s in shards] == present
    for s in shards:
        c = int(s.classes[0])
        assert set(s.indices.tolist()) == {c} and len(s.indices) == len(s)  # only its label, once per copy
        assert s.rows.tolist() == [r for r, lab in enumerate(labels) if c in lab]


def test_make_clients_and_errors():
    indptr, indices = csr_from_lists([[0], [1], [0, 1]])
    x = torch.arange(6, dtype=torch.float32).view(3, 2)
    clients = make_clients(x, one_label_per_client(indptr, indices, 2), 2)
    assert torch.equal(clients[0].x, x[[0, 2]]) and clients[1].indices.tolist() == [1, 1]
    with pytest.raises(ValueError, match="num_clients"):
        iid_partition(indptr, indices, 0)
    with pytest.raises(ValueError, match="beta"):
        dirichlet_partition(indptr, indices, 2, 2, 0.0)
    with pytest.raises(ValueError, match="num_classes"):
        fedmlh_partition(indptr, indices, 1, 2, 1)
    with pytest.raises(ValueError, match="indptr"):
        iid_partition(torch.tensor([0, 5]), indices, 1)


def test_synthetic_power_law_and_learnable():
    d = synthetic_multilabel(4000, 32, 100, labels_per_sample=3, exponent=1.0, seed=0)
    assert d.x.shape == (4000, 32) and d.x.dtype == torch.float32
    assert 2.7 < len(d.indices) / len(d) < 3.3
    counts = np.sort(label_counts(d.indptr, d.indices, 100))[::-1]
    assert counts[0] > 10 * counts[50]  # head much heavier than the middle of the tail
    for r in range(len(d)):  # sorted, distinct labels per sample
        lab = d.indices[d.indptr[r] : d.indptr[r + 1]]
        assert torch.all(lab[1:] > lab[:-1])
    # informative: nearest class prototype (least squares on one-hot) beats chance by far
    y = d.dense_labels()
    w = torch.linalg.lstsq(d.x[:3000], y[:3000]).solution
    top1 = (d.x[3000:] @ w).argmax(1)
    acc = y[3000:][torch.arange(1000), top1].mean()
    always_head = y[3000:, y[:3000].sum(0).argmax()].mean()  # predicting the most common class
    assert acc > always_head + 0.2
    assert torch.equal(synthetic_multilabel(50, 4, 10, seed=1).x, synthetic_multilabel(50, 4, 10, seed=1).x)
    with pytest.raises(ValueError, match="labels_per_sample"):
        synthetic_multilabel(10, 4, 10, labels_per_sample=0.5)
    assert len(synthetic_multilabel(0, 4, 10)) == 0


@given(
    label_sets,
    st.integers(1, 5),
    st.sampled_from([0.1, 1.0, 100.0]),
    st.sampled_from([0.3, 0.75, 1.0]),
    st.integers(0, 2**32),
)
def test_dirichlet_sample_matches_the_reference(lp, num_clients, beta, fraction, seed):
    p, labels = lp
    indptr, indices = csr_from_lists(labels)
    n = int(fraction * len(labels))
    if n < 1:
        with pytest.raises(ValueError, match="no sample"):
            dirichlet_sample_partition(indptr, indices, p, num_clients, beta, fraction, seed)
        return
    shards = dirichlet_sample_partition(indptr, indices, p, num_clients, beta, fraction, seed)
    want = dirichlet_sample_ref(labels, num_clients, beta, fraction, seed)
    assert [s.rows.tolist() for s in shards] == want
    for s in shards:
        assert len(s) == n  # every client draws exactly floor(fraction * N) rows, repeats included
        assert all(sorted(_labels_of(s, i)) == sorted(labels[r]) for i, r in enumerate(s.rows.tolist()))


def test_dirichlet_sample_overlaps_and_skews():
    d = synthetic_multilabel(num_samples=600, num_features=8, num_classes=20, seed=0)
    wide = dirichlet_sample_partition(d.indptr, d.indices, 20, 5, 100.0, 0.75, seed=1)
    skew = dirichlet_sample_partition(d.indptr, d.indices, 20, 5, 0.1, 0.75, seed=1)
    from fedkernels.data import split_statistics

    assert split_statistics(wide, 20)["copies_per_sample"] > 1.5  # 5 clients x 75%: samples are shared
    assert split_statistics(skew, 20)["mean_pairwise_tv"] > split_statistics(wide, 20)["mean_pairwise_tv"] + 0.2
    # a client's rows come from its own stream: more clients leave the first ones unchanged
    fewer = dirichlet_sample_partition(d.indptr, d.indices, 20, 3, 0.1, 0.75, seed=1)
    assert all(np.array_equal(a.rows, b.rows) for a, b in zip(fewer, skew, strict=False))


def test_dirichlet_sample_errors():
    indptr, indices = csr_from_lists([[0], [1], [0, 1]])
    for kw, match in (({"beta": 0.0}, "beta"), ({"fraction": 0.0}, "fraction"), ({"fraction": 1.5}, "fraction")):
        args = {"beta": 1.0, "fraction": 0.75, **kw}
        with pytest.raises(ValueError, match=match):
            dirichlet_sample_partition(indptr, indices, 2, 2, args["beta"], args["fraction"])
    with pytest.raises(ValueError, match="num_clients"):
        dirichlet_sample_partition(indptr, indices, 2, 0, 1.0)
