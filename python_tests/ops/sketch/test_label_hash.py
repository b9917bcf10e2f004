"""label_hash against the loop reference, with edge cases and bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import sketch_ref
from python_tests.support.helpers import csr_from_lists


@st.composite
def label_sets(draw):
    p = draw(st.integers(1, 300))
    n = draw(st.integers(0, 12))
    # duplicates inside a row are allowed and must not matter
    rows = [draw(st.lists(st.integers(0, p - 1), max_size=8)) for _ in range(n)]
    return p, rows


@given(data=label_sets(), r=st.integers(1, 6), b=st.integers(1, 64), seed=st.integers(0, 2**32))
def test_matches_reference(data, r, b, seed):
    p, rows = data
    hf = HashFamily(r, b, seed)
    table = hf.table(p)
    indptr, indices = csr_from_lists(rows)
    got = fedkernels.label_hash(indptr, indices, table, b)
    assert got.dtype == torch.uint8 and got.shape == (r, len(rows), b)
    assert torch.equal(got, sketch_ref.label_hash(indptr, indices, table, b))


def test_on_device(device):
    hf = HashFamily(4, 250, seed=9)
    rows = [[0, 5, 3992], [], [17, 17], [3000]]
    indptr, indices = csr_from_lists(rows, device)
    got = fedkernels.label_hash(indptr, indices, hf.table(3993, device=device), 250)
    want = sketch_ref.label_hash(indptr.cpu(), indices.cpu(), hf.table(3993), 250)
    assert got.device.type == device and torch.equal(got.cpu(), want)
    assert got[:, 1].sum() == 0  # a sample with no labels hashes to nothing


def test_empty_batch():
    hf = HashFamily(2, 8)
    out = fedkernels.label_hash(torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), hf.table(5), 8)
    assert out.shape == (2, 0, 8)


def _args():
    hf = HashFamily(2, 8, seed=1)
    indptr, indices = csr_from_lists([[0, 1], [4]])
    return indptr, indices, hf.table(5), 8


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda a: (a[0], torch.tensor([0, 1, 5]), a[2], a[3]), IndexError, "indices"),
        (lambda a: (a[0], torch.tensor([0, -1, 4]), a[2], a[3]), IndexError, "indices"),
        (lambda a: (a[0].float(), a[1], a[2], a[3]), ValueError, "indptr"),
        (lambda a: (a[0], a[1].float(), a[2], a[3]), ValueError, "indices"),
        (lambda a: (torch.tensor([0, 2, 1]), a[1], a[2], a[3]), ValueError, "indptr"),
        (lambda a: (torch.tensor([1, 2, 3]), a[1], a[2], a[3]), ValueError, "indptr"),
        (lambda a: (torch.tensor([0, 2, 4]), a[1], a[2], a[3]), ValueError, "indptr"),
        (lambda a: (a[0], a[1], a[2].float(), a[3]), ValueError, "table"),
        (lambda a: (a[0], a[1], a[2][:, :0], a[3]), ValueError, "table"),
        (lambda a: (a[0], a[1], a[2], 0), ValueError, "num_buckets"),
        (lambda a: (a[0], a[1], a[2], 4), IndexError, "table"),  # buckets >= B in the table
    ],
)
def test_bad_input(mutate, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.label_hash(*mutate(_args()))


def test_opcheck_and_compile():
    args = _args()
    torch.library.opcheck(torch.ops.fedkernels.label_hash.default, args)
    compiled = torch.compile(fedkernels.label_hash, fullgraph=True)
    assert torch.equal(compiled(*args), fedkernels.label_hash(*args))


def test_deterministic_across_threads():
    hf = HashFamily(4, 1000, seed=2)
    g = torch.Generator().manual_seed(0)
    rows = [
        torch.randint(0, 30938, (int(k),), generator=g).tolist() for k in torch.randint(0, 20, (2000,), generator=g)
    ]
    indptr, indices = csr_from_lists(rows)
    t = hf.table(30938)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = fedkernels.label_hash(indptr, indices, t, 1000)
        torch.set_num_threads(max(2, old))
        b = fedkernels.label_hash(indptr, indices, t, 1000)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(a, b)
