"""Inputs users hold: int32 CSR from scipy, numpy arrays, int64 hash tables, label lists and
multi-hot matrices. Each is checked against the same call with the canonical int64/int32 tensors
(or an obvious loop), and a wrong-length ``indptr`` names ``indptr``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from fedkernels import metrics
from fedkernels.data import labels_to_csr, multi_hot_to_csr
from fedkernels.hashing import HashFamily
from fedkernels.nn import FedMLHHead

label_lists = st.lists(st.lists(st.integers(0, 29), max_size=6), max_size=12)


def _ref_csr(labels: list[list[int]]) -> tuple[list[int], list[int]]:
    indptr, indices = [0], []
    for row in labels:
        indices.extend(row)
        indptr.append(len(indices))
    return indptr, indices


@settings(max_examples=80, deadline=None)
@given(labels=label_lists)
def test_labels_to_csr_matches_loop(labels):
    indptr, indices = labels_to_csr(labels)
    want_ptr, want_idx = _ref_csr(labels)
    assert indptr.dtype == indices.dtype == torch.int64
    assert indptr.tolist() == want_ptr and indices.tolist() == want_idx
    # numpy rows and numpy ints are accepted alike
    indptr2, indices2 = labels_to_csr([np.array(r, dtype=np.int32) for r in labels])
    assert torch.equal(indptr, indptr2) and torch.equal(indices, indices2)


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 10),
    p=st.integers(0, 12),
    seed=st.integers(0, 2**31 - 1),
    dtype=st.sampled_from([torch.bool, torch.uint8, torch.int32, torch.int64, torch.float32, torch.float64]),
    as_numpy=st.booleans(),
)
def test_multi_hot_to_csr_matches_loop(n, p, seed, dtype, as_numpy):
    g = torch.Generator().manual_seed(seed)
    y = (torch.rand(n, p, generator=g) < 0.3).to(dtype)
    indptr, indices = multi_hot_to_csr(y.numpy() if as_numpy else y)
    want = [[c for c in range(p) if bool(y[r, c])] for r in range(n)]
    want_ptr, want_idx = _ref_csr(want)
    assert indptr.dtype == indices.dtype == torch.int64
    assert indptr.tolist() == want_ptr and indices.tolist() == want_idx


@pytest.mark.parametrize(
    ("labels", "match"),
    [([[1, -1]], "labels\\[0\\]"), ([[1], [0.5]], "labels\\[1\\]"), ([3], "labels\\[0\\]"), ([[True]], "labels")],
)
def test_labels_to_csr_bad_input(labels, match):
    with pytest.raises(ValueError, match=match):
        labels_to_csr(labels)


@pytest.mark.parametrize(
    ("y", "match"), [(torch.tensor([[0, 2]]), "y"), (torch.zeros(3), "y"), (torch.tensor([[0.5, 1.0]]), "y")]
)
def test_multi_hot_to_csr_bad_input(y, match):
    with pytest.raises(ValueError, match=match):
        multi_hot_to_csr(y)
    with pytest.raises(TypeError, match="y"):
        multi_hot_to_csr([[0, 1]])


def _scipy_csr(labels: list[list[int]], p: int) -> sp.csr_matrix:
    """What a user reading an XC file with scipy holds: int32 indptr and indices."""
    indptr, indices = _ref_csr(labels)
    m = sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr), shape=(len(labels), p))
    assert m.indptr.dtype == np.int32 and m.indices.dtype == np.int32
    return m


@settings(max_examples=40, deadline=None)
@given(labels=label_lists, seed=st.integers(0, 1000))
def test_label_hash_takes_scipy_csr_and_int64_table(labels, seed):
    hf = HashFamily(3, 7, seed)
    table = hf.table(30)
    indptr, indices = labels_to_csr(labels)
    want = fedkernels.label_hash(indptr, indices, table, 7)
    y = _scipy_csr(labels, 30)
    assert torch.equal(fedkernels.label_hash(y.indptr, y.indices, table, 7), want)
    assert torch.equal(fedkernels.label_hash(indptr.int(), indices.int(), table.long(), 7), want)
    assert torch.equal(fedkernels.label_hash(indptr, indices, table.numpy().astype(np.int64), 7), want)


def test_sketch_ops_take_int64_tables_and_numpy():
    hf = HashFamily(3, 8, 5)
    table, signs = hf.table(40), hf.signs(40)
    logp = torch.randn(3, 4, 8)
    assert torch.equal(fedkernels.bucket_merge(logp, table.long()), fedkernels.bucket_merge(logp, table))
    assert torch.equal(fedkernels.bucket_merge(logp.numpy(), table.numpy()), fedkernels.bucket_merge(logp, table))
    v1, i1 = fedkernels.bucket_merge_topk(logp, table.long(), 3)
    v2, i2 = fedkernels.bucket_merge_topk(logp, table, 3)
    assert torch.equal(v1, v2) and torch.equal(i1, i2)
    x = torch.randn(2, 40)
    sk = fedkernels.count_sketch(x, table, signs, 8)
    assert torch.equal(fedkernels.count_sketch(x.numpy(), table.long(), signs.numpy(), 8), sk)
    assert torch.equal(
        fedkernels.count_sketch_query(sk.numpy(), table.long(), signs), fedkernels.count_sketch_query(sk, table, signs)
    )


@pytest.mark.parametrize("bad", [torch.tensor([[0, 2**31]]), torch.tensor([[-1, 0]])])
def test_int64_table_out_of_range_names_table(bad):
    with pytest.raises(ValueError, match="table"):
        fedkernels.bucket_merge(torch.randn(2, 1, 8), bad)


@settings(max_examples=30, deadline=None)
@given(labels=st.lists(st.lists(st.integers(0, 49), max_size=5), min_size=1, max_size=6), seed=st.integers(0, 99))
def test_sampling_takes_int32_and_numpy(labels, seed):
    indptr, indices = labels_to_csr(labels)
    want = fedkernels.sample_negatives_batched(indptr, indices, 60, 4, seed)
    y = _scipy_csr(labels, 50)
    assert torch.equal(fedkernels.sample_negatives_batched(y.indptr, y.indices, 60, 4, seed), want)
    pos = np.array(labels[0], dtype=np.int32)
    want_one = fedkernels.sample_negatives(torch.tensor(labels[0], dtype=torch.int64), 60, 4, seed)
    assert torch.equal(fedkernels.sample_negatives(pos, 60, 4, seed), want_one)


def test_fedmlh_head_takes_scipy_csr_and_names_indptr():
    head = FedMLHHead(5, num_classes=30, num_tables=2, num_buckets=8, seed=1)
    x = torch.randn(4, 5)
    labels = [[1, 2], [], [29], [0, 5, 7]]
    indptr, indices = labels_to_csr(labels)
    y = _scipy_csr(labels, 30)
    assert torch.equal(head.loss(x, y.indptr, y.indices), head.loss(x, indptr, indices))
    with pytest.raises(ValueError, match="indptr"):
        head.loss(x, indptr[:-1], indices[: int(indptr[-2])])
    with pytest.raises(ValueError, match="indptr"):
        head.loss(x, torch.cat([indptr, indptr[-1:]]), indices)


@settings(max_examples=30, deadline=None)
@given(
    # label sets: the metrics refuse a label repeated within a row
    labels=st.lists(st.lists(st.integers(0, 9), max_size=4, unique=True), min_size=1, max_size=8),
    seed=st.integers(0, 99),
)
def test_metrics_take_numpy_and_int32(labels, seed):
    g = torch.Generator().manual_seed(seed)
    topk = torch.stack([torch.randperm(10, generator=g)[:3] for _ in labels])
    indptr, indices = labels_to_csr(labels)
    want = metrics.ranking_metrics(topk, indptr, indices, ks=(1, 3))
    y = _scipy_csr(labels, 10)
    got = metrics.ranking_metrics(topk.numpy(), y.indptr, y.indices, ks=(1, 3))
    assert got == want
    assert metrics.precision_at_k(topk.int(), y.indptr, y.indices, 2) == metrics.precision_at_k(
        topk, indptr, indices, 2
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda t, ip, ix: metrics.precision_at_k(t, ip, ix, 1),
        lambda t, ip, ix: metrics.ndcg_at_k(t, ip, ix, 1),
        lambda t, ip, ix: metrics.map_at_k(t, ip, ix, 1),
        lambda t, ip, ix: metrics.top1_accuracy(t, ip, ix),
    ],
)
def test_metrics_wrong_length_indptr_names_it(fn):
    topk = torch.zeros(3, 2, dtype=torch.int64)
    with pytest.raises(ValueError, match="indptr"):
        fn(topk, torch.tensor([0, 1, 2]), torch.tensor([0, 1]))


def test_float_indices_are_rejected_by_name():
    hf = HashFamily(2, 8, 0)
    with pytest.raises(ValueError, match="indices"):
        fedkernels.label_hash(torch.tensor([0, 1]), torch.tensor([1.0]), hf.table(5), 8)
    with pytest.raises(TypeError, match="indptr"):
        fedkernels.label_hash([0, 1], torch.tensor([1]), hf.table(5), 8)
