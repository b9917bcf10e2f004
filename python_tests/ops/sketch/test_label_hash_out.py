"""label_hash(..., out=): bit-identical to the functional op and the reference, into any prior
buffer contents; bad out rejected before anything is written."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import sketch_ref
from python_tests.support.helpers import csr_from_lists

# torch < 2.13 cannot functionalize a custom op whose output aliases an input (no Tag.out;
# src/fedkernels/ops/sketch.py defines the schema without it there), so opcheck and torch.compile of
# the out= form fail on it. The wheel loads on torch >= 2.10 (CI runs these tests on 2.10.0).
needs_out_tag = pytest.mark.skipif(
    tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13),
    reason="torch < 2.13 cannot functionalize custom out= ops (no Tag.out)",
)


@st.composite
def label_sets(draw):
    p = draw(st.integers(1, 300))
    n = draw(st.integers(0, 12))  # includes N = 0
    # duplicates inside a row (and empty rows) are allowed and must not matter
    rows = [draw(st.lists(st.integers(0, p - 1), max_size=8)) for _ in range(n)]
    return p, rows


@given(
    data=label_sets(),
    r=st.integers(1, 6),
    b=st.integers(1, 64),
    seed=st.integers(0, 2**32),
    fill=st.sampled_from([0x00, 0x01, 0xFF, None]),
)
def test_out_matches_functional_and_reference(data, r, b, seed, fill):
    p, rows = data
    table = HashFamily(r, b, seed).table(p)
    indptr, indices = csr_from_lists(rows)
    if fill is None:  # arbitrary garbage
        buf = torch.randint(0, 256, (r, len(rows), b), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    else:
        buf = torch.full((r, len(rows), b), fill, dtype=torch.uint8)
    got = fedkernels.label_hash(indptr, indices, table, b, out=buf)
    assert got is buf
    assert torch.equal(buf, fedkernels.label_hash(indptr, indices, table, b))
    assert torch.equal(buf, sketch_ref.label_hash(indptr, indices, table, b))


def test_reused_buffer_across_batches(device):
    """One buffer, several same-shape batches: each call's result depends only on its own batch."""
    hf = HashFamily(4, 1000, seed=3)
    t = hf.table(30938, device=device)
    g = torch.Generator().manual_seed(1)
    buf = torch.full((4, 300, 1000), 0xFF, dtype=torch.uint8, device=device)
    for _ in range(3):
        rows = [
            torch.randint(0, 30938, (int(k),), generator=g).tolist() for k in torch.randint(0, 9, (300,), generator=g)
        ]
        indptr, indices = csr_from_lists(rows, device)
        fedkernels.label_hash(indptr, indices, t, 1000, out=buf)
        assert torch.equal(buf.cpu(), sketch_ref.label_hash(indptr.cpu(), indices.cpu(), hf.table(30938), 1000))


def test_large_output_across_threads():
    """Many sample blocks (the CPU splits work by 256 KiB of output): same bytes for 1 and 2 threads."""
    hf = HashFamily(8, 5000, seed=4)
    t = hf.table(312330)
    g = torch.Generator().manual_seed(2)
    indptr = torch.arange(0, 5 * 257, 5, dtype=torch.int64)
    indices = torch.randint(0, 312330, (5 * 256,), generator=g)
    want = fedkernels.label_hash(indptr, indices, t, 5000)
    old = torch.get_num_threads()
    try:
        for threads in (1, max(2, old)):
            torch.set_num_threads(threads)
            buf = torch.full_like(want, 0xFF)
            fedkernels.label_hash(indptr, indices, t, 5000, out=buf)
            assert torch.equal(buf, want)
    finally:
        torch.set_num_threads(old)
    assert int(want.sum()) <= 8 * 5 * 256 and int(want.sum()) > 0


def _args():
    hf = HashFamily(2, 8, seed=1)
    indptr, indices = csr_from_lists([[0, 1], [4]])
    return indptr, indices, hf.table(5), 8


def _aliasing_indices():
    """indices whose bytes also back a uint8 [2, 2, 8] view: out would overwrite the class ids."""
    backing = torch.zeros(4, dtype=torch.int64)
    backing[:3] = torch.tensor([0, 1, 4])
    return backing[:3], backing.view(torch.uint8).view(2, 2, 8)


@pytest.mark.parametrize(
    "make_out, match",
    [
        (lambda: torch.full((2, 2, 8), 7, dtype=torch.int64), "out must have dtype"),
        (lambda: torch.full((2, 2, 8), 7, dtype=torch.bool), "out must have dtype"),
        (lambda: torch.full((2, 2, 9), 7, dtype=torch.uint8), r"out must have shape \[R, N, B\] = \[2, 2, 8\]"),
        (lambda: torch.full((2, 3, 8), 7, dtype=torch.uint8), r"out must have shape"),
        (lambda: torch.full((4, 8), 7, dtype=torch.uint8), r"out must have shape"),
        (lambda: torch.full((2, 2, 8, 1), 7, dtype=torch.uint8), r"out must have shape"),
        (lambda: torch.full((2, 8, 2), 7, dtype=torch.uint8).transpose(1, 2), "out must be contiguous"),
        (lambda: torch.full((2, 2, 16), 7, dtype=torch.uint8)[:, :, ::2], "out must be contiguous"),
    ],
)
def test_bad_out_raises_before_writing(make_out, match):
    out = make_out()
    before = out.clone()
    with pytest.raises(ValueError, match=match):
        fedkernels.label_hash(*_args(), out=out)
    assert torch.equal(out, before)


def test_out_overlapping_an_input_is_rejected():
    indices, out = _aliasing_indices()
    indptr, _, table, b = _args()
    before = indices.clone()
    with pytest.raises(ValueError, match="out must not share memory"):
        fedkernels.label_hash(indptr, indices, table, b, out=out)
    assert torch.equal(indices, before)
    table_before = table.clone()
    out_on_table = table.view(torch.uint8).reshape(-1)[:32].view(2, 2, 8)  # int32 [5, 2] is 40 bytes
    with pytest.raises(ValueError, match="out must not share memory"):
        fedkernels.label_hash(indptr, indices.clone(), table, b, out=out_on_table)
    assert torch.equal(table, table_before)


def test_bad_inputs_with_out_leave_out_untouched():
    """An input error is raised before out is written, too."""
    indptr, indices, table, b = _args()
    out = torch.full((2, 2, 8), 7, dtype=torch.uint8)
    with pytest.raises(IndexError, match="indices"):
        fedkernels.label_hash(indptr, torch.tensor([0, 1, 5]), table, b, out=out)
    with pytest.raises(ValueError, match="num_buckets"):
        fedkernels.label_hash(indptr, indices, table, 0, out=torch.full((2, 2, 0), 7, dtype=torch.uint8))
    assert torch.equal(out, torch.full((2, 2, 8), 7, dtype=torch.uint8))


def test_out_on_meta_device():
    # CPU inputs with a meta out dispatch to the fake kernel, which makes the same device check
    with pytest.raises(ValueError, match="out and indices must be on the same device"):
        fedkernels.label_hash(*_args(), out=torch.empty(2, 2, 8, dtype=torch.uint8, device="meta"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_out_on_wrong_device():
    out = torch.full((2, 2, 8), 7, dtype=torch.uint8, device="cuda")
    with pytest.raises(ValueError, match="out"):
        fedkernels.label_hash(*_args(), out=out)
    assert bool((out == 7).all())


def test_empty_batch_into_out():
    indptr, indices = torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
    out = torch.empty(2, 0, 8, dtype=torch.uint8)
    assert fedkernels.label_hash(indptr, indices, HashFamily(2, 8).table(5), 8, out=out) is out


@needs_out_tag
def test_opcheck_out_overload():
    indptr, indices, table, b = _args()
    torch.library.opcheck(
        torch.ops.fedkernels.label_hash.out,
        (indptr, indices, table, b),
        {"out": torch.full((2, 2, 8), 0xFF, dtype=torch.uint8)},
    )


@needs_out_tag
def test_compile_fullgraph_with_out():
    indptr, indices, table, b = _args()

    def f(ip, ix, t, buf):
        return fedkernels.label_hash(ip, ix, t, b, out=buf)

    compiled = torch.compile(f, fullgraph=True)
    buf = torch.full((2, 2, 8), 0xFF, dtype=torch.uint8)
    got = compiled(indptr, indices, table, buf)
    want = fedkernels.label_hash(indptr, indices, table, b)
    # compiled code writes the result back into buf (functionalised out=); the returned tensor holds it too
    assert torch.equal(buf, want) and torch.equal(got, want)
