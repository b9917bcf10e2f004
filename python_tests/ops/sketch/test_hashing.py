"""HashFamily against plain Python integers (docs/design.md §2)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedkernels import HashFamily
from python_tests.reference import hashing_ref as ref


def test_design_example(device):
    hf = HashFamily(num_tables=4, num_buckets=4000, seed=42)
    ids = torch.tensor([123456], device=device)
    assert hf.buckets(ids).tolist() == [[249, 3301, 1735, 105]]
    assert hf.sign(ids).tolist() == [[1, -1, 1, 1]]


@given(
    seed=st.integers(0, 2**64 - 1),
    r=st.integers(1, 9),
    b=st.integers(1, 70000),
    ids=st.lists(st.integers(0, 2**31 - 1), min_size=0, max_size=40),
)
def test_matches_python_integers(seed, r, b, ids):
    hf = HashFamily(r, b, seed)
    p = ref.params(seed, r)
    assert hf.params.tolist() == [list(x) for x in p]
    t = torch.tensor(ids, dtype=torch.int64)
    got_b, got_s = hf.buckets(t), hf.sign(t)
    assert got_b.dtype == torch.int32 and got_s.dtype == torch.int8
    assert got_b.shape == (len(ids), r)
    assert got_b.tolist() == [[ref.bucket(p[j], i, b) for j in range(r)] for i in ids]
    assert got_s.tolist() == [[ref.sign(p[j], i) for j in range(r)] for i in ids]


@given(seed=st.integers(0, 2**64 - 1), ids=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=20))
def test_huge_ids_exact(seed, ids):
    hf = HashFamily(3, 997, seed)
    p = ref.params(seed, 3)
    got = hf.buckets(torch.tensor(ids, dtype=torch.int64)).tolist()
    assert got == [[ref.bucket(p[j], i, 997) for j in range(3)] for i in ids]


def test_table_and_signs(device):
    hf = HashFamily(5, 123, seed=7)
    t, s = hf.table(1000, device=device), hf.signs(1000, device=device)
    assert t.shape == (1000, 5) and t.dtype == torch.int32 and t.device.type == device
    assert torch.equal(t.cpu(), hf.buckets(torch.arange(1000)))
    assert torch.equal(s.cpu(), hf.sign(torch.arange(1000)))
    assert set(s.unique().tolist()) == {-1, 1}


def test_buckets_keep_shape():
    hf = HashFamily(2, 10, seed=1)
    assert hf.buckets(torch.zeros(3, 4, dtype=torch.int64)).shape == (3, 4, 2)
    assert hf.buckets(torch.zeros(0, dtype=torch.int64)).shape == (0, 2)


def test_buckets_roughly_uniform():
    # 2-universal: 200k classes into 100 buckets, every bucket within 10% of the mean.
    hf = HashFamily(2, 100, seed=3)
    counts = torch.bincount(hf.table(200_000)[:, 0].long(), minlength=100)
    assert counts.min() > 1800 and counts.max() < 2200


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_tables=0, num_buckets=4), "num_tables"),
        (dict(num_tables=2, num_buckets=0), "num_buckets"),
        (dict(num_tables=2, num_buckets=4, seed=-1), "seed"),
        (dict(num_tables=2, num_buckets=4, seed=2**64), "seed"),
    ],
)
def test_bad_family(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HashFamily(**kwargs)


def test_bad_ids():
    hf = HashFamily(2, 4)
    with pytest.raises(IndexError, match="ids"):
        hf.buckets(torch.tensor([-1]))
    with pytest.raises(ValueError, match="int64"):
        hf.buckets(torch.tensor([1], dtype=torch.int32))


def test_opcheck():
    hf = HashFamily(3, 50, seed=5)
    torch.library.opcheck(torch.ops.fedkernels.hash_buckets.default, (torch.arange(17), hf.params, 50))
