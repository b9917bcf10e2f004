"""masked_weighted_average against the obvious per-tensor loop."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import select_ref

CHUNK = 8192  # kSelectChunk in csrc/select/select.h
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
# float32 accumulation of normalised weights vs a float64 reference rounded to the dtype.
TOL = {
    torch.float32: dict(rtol=2e-6, atol=2e-6),
    torch.float64: dict(rtol=1e-12, atol=1e-12),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=8e-3, atol=8e-3),
}


@st.composite
def rounds(draw):
    """A server model (dst) and what each client sent: distinct idx, matching tensors, a weight."""
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    m = draw(st.integers(1, 7))
    shapes = [draw(st.sampled_from([(), (3,), (4, 5), (0,), (CHUNK + 3,), (2, 3, 7)])) for _ in range(m)]
    dtypes = [draw(st.sampled_from(DTYPES)) for _ in range(m)]
    dst = [torch.randn(s, generator=g).to(d) for s, d in zip(shapes, dtypes, strict=True)]
    sent = []
    for _ in range(draw(st.integers(0, 5))):
        idx = draw(st.lists(st.integers(0, m - 1), unique=True, max_size=m))
        idx = draw(st.permutations(idx))
        w = draw(st.sampled_from([0.0, 1.0, 0.5, 3.0, 1234.0]))
        tensors = [torch.randn(shapes[i], generator=g).to(dtypes[i]) for i in idx]
        sent.append((torch.tensor(idx, dtype=torch.int64), tensors, w))
    # every sent tensor needs one sender with positive weight
    senders: dict[int, float] = {}
    for idx, _, w in sent:
        for i in idx.tolist():
            senders[i] = senders.get(i, 0.0) + w
    if any(v == 0.0 for v in senders.values()):
        sent = [(idx, ts, w if w > 0 else 1.0) for idx, ts, w in sent]
    return dst, sent


@given(data=rounds())
def test_matches_reference(data):
    dst, sent = data
    want = select_ref.masked_weighted_average(dst, sent)
    sent_any = {i for idx, _, _ in sent for i in idx.tolist()}
    before = [d.clone() for d in dst]
    fedkernels.masked_weighted_average(dst, sent)
    for t, (got, ref) in enumerate(zip(dst, want, strict=True)):
        if t in sent_any:
            torch.testing.assert_close(got, ref, **TOL[got.dtype])
        else:
            assert torch.equal(got, before[t])  # untouched, bit for bit


def test_on_device(device):
    g = torch.Generator().manual_seed(1)
    dst = [torch.randn(3 * CHUNK + 5, generator=g), torch.randn(4, 4, generator=g).half(), torch.randn(6, generator=g)]
    sent = [
        (torch.tensor([0, 1]), [torch.randn(3 * CHUNK + 5, generator=g), torch.randn(4, 4, generator=g).half()], 2.0),
        (torch.tensor([0]), [torch.randn(3 * CHUNK + 5, generator=g)], 6.0),
    ]
    want = select_ref.masked_weighted_average(dst, sent)
    dst_dev = [d.to(device) for d in dst]
    fedkernels.masked_weighted_average(dst_dev, [(i, [x.to(device) for x in xs], w) for i, xs, w in sent])
    for got, ref in zip(dst_dev, want, strict=True):
        torch.testing.assert_close(got.cpu(), ref, **TOL[ref.dtype])
    assert torch.equal(dst_dev[2].cpu(), dst[2])


def test_single_sender_copies_exactly():
    x = torch.randn(2 * CHUNK + 1)
    dst = [torch.zeros(2 * CHUNK + 1), torch.zeros(3)]
    fedkernels.masked_weighted_average(dst, [(torch.tensor([0]), [x], 7.5)])
    assert torch.equal(dst[0], x) and torch.equal(dst[1], torch.zeros(3))


def test_hand_computed():
    dst = [torch.zeros(2), torch.zeros(3)]
    fedkernels.masked_weighted_average(
        dst,
        [
            (torch.tensor([1]), [torch.ones(3)], 1.0),
            (torch.tensor([1, 0]), [torch.full((3,), 4.0), torch.ones(2)], 3.0),
        ],
    )
    assert dst[0].tolist() == [1.0, 1.0] and dst[1].tolist() == [3.25, 3.25, 3.25]


def test_non_contiguous():
    base = torch.zeros(6, 8)
    dst = [base.t(), torch.zeros(3)]
    x1, x2 = torch.randn(6, 8).t(), torch.randn(16)[::2]
    fedkernels.masked_weighted_average(
        dst, [(torch.tensor([0]), [x1], 1.0), (torch.tensor([0]), [x2.reshape(8, 1).expand(8, 6)], 1.0)]
    )
    torch.testing.assert_close(base.t(), (x1 + x2.reshape(8, 1)) / 2, rtol=1e-6, atol=1e-6)


def test_nothing_sent():
    dst = [torch.randn(3)]
    before = dst[0].clone()
    fedkernels.masked_weighted_average(dst, [])
    fedkernels.masked_weighted_average(dst, [(torch.empty(0, dtype=torch.int64), [], 1.0)])
    fedkernels.masked_weighted_average([], [])
    assert torch.equal(dst[0], before)


def _dst():
    return [torch.zeros(3), torch.zeros(2, 2)]


@pytest.mark.parametrize(
    "sent, exc, match",
    [
        ([(torch.tensor([2]), [torch.ones(3)], 1.0)], IndexError, "idx"),
        ([(torch.tensor([-1]), [torch.ones(3)], 1.0)], IndexError, "idx"),
        ([(torch.tensor([0, 0]), [torch.ones(3), torch.ones(3)], 1.0)], ValueError, "duplicate idx"),
        ([(torch.tensor([0]), [torch.ones(4)], 1.0)], ValueError, "shape"),
        ([(torch.tensor([1]), [torch.ones(4)], 1.0)], ValueError, "shape"),
        ([(torch.tensor([0]), [torch.ones(3).double()], 1.0)], ValueError, "dtype"),
        ([(torch.tensor([0]), [torch.ones(3).to("meta")], 1.0)], ValueError, "device"),
        ([(torch.tensor([0, 1]), [torch.ones(3)], 1.0)], ValueError, "idx has 2 entries"),
        ([(torch.tensor([0]), [torch.ones(3)], -1.0)], ValueError, "weights"),
        ([(torch.tensor([0]), [torch.ones(3)], float("nan"))], ValueError, "weights"),
        (
            [(torch.tensor([0]), [torch.ones(3)], 0.0), (torch.tensor([0]), [torch.ones(3)], 0.0)],
            ValueError,
            "sum to zero",
        ),
        ([(torch.tensor([0.0]), [torch.ones(3)], 1.0)], ValueError, "idx"),
        ([(torch.tensor([0]), [torch.ones(3)])], ValueError, "tuple"),
    ],
)
def test_bad_input(sent, exc, match):
    dst = _dst()
    # a valid first client, so a failure half-way would show as a changed dst
    sent = [(torch.tensor([1]), [torch.full((2, 2), 5.0)], 1.0), *sent]
    with pytest.raises(exc, match=match):
        fedkernels.masked_weighted_average(dst, sent)
    assert all(torch.equal(d, z) for d, z in zip(dst, _dst(), strict=True))  # validated before any write


def test_bad_dst():
    with pytest.raises(ValueError, match=r"dst\[1\]"):
        fedkernels.masked_weighted_average([torch.zeros(3), torch.zeros(2, dtype=torch.int64)], [])


def test_opcheck_and_compile():
    dst = [torch.zeros(3), torch.randn(CHUNK + 2)]
    flat = [torch.ones(3), torch.randn(CHUNK + 2), torch.randn(CHUNK + 2)]
    args = (dst, flat, torch.tensor([0, 0, 1]), torch.tensor([0, 1, 1]), torch.tensor([1.0, 2.0], dtype=torch.float64))
    torch.library.opcheck(torch.ops.fedkernels.masked_weighted_average.default, args)

    def average(d, x0, x1):
        fedkernels.masked_weighted_average(d, [(torch.tensor([0]), [x0], 1.0), (torch.tensor([0]), [x1], 3.0)])
        return d[0] * 1

    eager = [torch.zeros(3)]
    want = average(eager, torch.ones(3), torch.full((3,), 5.0))
    got = torch.compile(average, fullgraph=True)([torch.zeros(3)], torch.ones(3), torch.full((3,), 5.0))
    assert torch.equal(got, want) and want.tolist() == [4.0, 4.0, 4.0]


def test_deterministic_across_threads():
    g = torch.Generator().manual_seed(9)
    shapes = [(100_003,), (7,), (40 * CHUNK + 1,), (300, 11)]
    sent = [(torch.arange(len(shapes)), [torch.randn(s, generator=g) for s in shapes], float(c + 1)) for c in range(4)]
    outs = []
    old = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            dst = [torch.zeros(s) for s in shapes]
            fedkernels.masked_weighted_average(dst, sent)
            outs.append(dst)
    finally:
        torch.set_num_threads(old)
    assert all(torch.equal(a, b) for a, b in zip(*outs, strict=True))
