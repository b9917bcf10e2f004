"""bench/fl/hashed_split_tv.py: the split's TV over a hash table's buckets, against direct cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data.partition import Shard, split_statistics
from python_tests.support.paths import ROOT
from python_tests.support.scripts import load_script

_script = load_script(ROOT / "bench" / "fl" / "hashed_split_tv.py")
hashed_split_tv, owner_share = _script.hashed_split_tv, _script.owner_share


def _shards(label_lists: list[list[list[int]]]) -> list[Shard]:
    out = []
    for rows in label_lists:
        ptr = np.cumsum([0] + [len(r) for r in rows]).astype(np.int64)
        idx = np.array([c for r in rows for c in r], dtype=np.int64)
        out.append(Shard(np.arange(len(rows)), ptr, idx))
    return out


def _splits(num_classes: int, min_clients: int):
    """Clients of 1-4 samples, each sample with 1-3 labels in [0, num_classes)."""
    sample = st.lists(st.integers(0, num_classes - 1), min_size=1, max_size=3)
    return st.lists(st.lists(sample, min_size=1, max_size=4), min_size=min_clients, max_size=4)


@settings(max_examples=30, deadline=None)
@given(_splits(6, min_clients=2))
def test_identity_table_is_the_class_tv_and_one_bucket_is_zero(labels):
    shards = _shards(labels)
    identity = torch.arange(6)[:, None].repeat(1, 2)
    got = hashed_split_tv(shards, identity, 6)
    assert got == pytest.approx([split_statistics(shards, 6)["mean_pairwise_tv"]] * 2)
    assert hashed_split_tv(shards, torch.zeros(6, 1, dtype=torch.int64), 1) == pytest.approx([0.0])


def test_hashing_two_owned_classes_together_hides_the_skew():
    # client 0 holds only class 0, client 1 only class 1: disjoint (TV 1) over classes, identical
    # (TV 0) where a table puts both classes in one bucket, disjoint again where it keeps them apart
    shards = _shards([[[0], [0]], [[1]]])
    table = torch.tensor([[0, 0], [0, 1]])
    assert hashed_split_tv(shards, table, 2) == pytest.approx([0.0, 1.0])


@settings(max_examples=30, deadline=None)
@given(_splits(5, min_clients=1))
def test_owner_share_matches_the_loop(labels):
    shards = _shards(labels)
    label_map = np.array([0, 1, 1, 2, 0])  # five classes into three labels
    per_client = [[label_map[c] for rows in client for c in rows] for client in labels]
    total = sum(len(x) for x in per_client)
    want = sum(max(x.count(lab) for x in per_client) for lab in range(3)) / total
    assert owner_share(shards, label_map, 3) == pytest.approx(want)


def test_owner_share_extremes():
    even = _shards([[[0], [1]], [[0], [1]]])  # both clients hold each label equally
    assert owner_share(even, np.arange(2), 2) == pytest.approx(0.5)
    apart = _shards([[[0], [0]], [[1]]])  # each label on one client
    assert owner_share(apart, np.arange(2), 2) == pytest.approx(1.0)
