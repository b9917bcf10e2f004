"""delta_norms and select_topk_tensors against the obvious per-tensor loop."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import select_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
# float32 partial sums over short runs, then float64: a few float32 ulps from the exact norm.
RTOL = {torch.float32: 2e-6, torch.float16: 2e-6, torch.bfloat16: 2e-6, torch.float64: 2e-6}

CHUNK = 8192  # kSelectChunk in csrc/select/select.h: sizes around it cross chunk boundaries


@st.composite
def tensor_pairs(draw, max_tensors: int = 8):
    """M pairs (new, old) of mixed shapes and dtypes, some crossing chunk boundaries."""
    m = draw(st.integers(1, max_tensors))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    new, old = [], []
    for _ in range(m):
        dtype = draw(st.sampled_from(DTYPES))
        kind = draw(st.sampled_from(["small", "chunky", "matrix", "empty", "scalar"]))
        shape = {
            "small": (draw(st.integers(1, 40)),),
            "chunky": (draw(st.sampled_from([CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])),),
            "matrix": (draw(st.integers(1, 70)), draw(st.integers(1, 70))),
            "empty": (draw(st.integers(0, 3)), 0),
            "scalar": (),
        }[kind]
        scale = draw(st.sampled_from([1e-3, 1.0, 50.0]))
        a = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
        same = draw(st.booleans()) and kind == "small"
        b = a.clone() if same else (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
        new.append(a)
        old.append(b)
    return new, old


def _to(ts: list[torch.Tensor], device: str) -> list[torch.Tensor]:
    return [t.to(device) for t in ts]


@given(pairs=tensor_pairs(), normalize=st.booleans())
def test_norms_match_reference(pairs, normalize):
    new, old = pairs
    got = fedkernels.delta_norms(new, old, normalize=normalize)
    want = select_ref.delta_norms(new, old, normalize)
    assert got.dtype == torch.float32 and got.shape == (len(new),)
    rtol = max(RTOL[t.dtype] for t in new)
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=0.0)


def test_norms_on_device(device):
    g = torch.Generator().manual_seed(3)
    new = [
        torch.randn(7, 5, generator=g),
        torch.randn(2 * CHUNK + 3, generator=g).half(),
        torch.randn(40, generator=g).bfloat16(),
        torch.randn(3, generator=g).double(),
    ]
    old = [torch.randn(t.shape, generator=g).to(t.dtype) for t in new]
    got = fedkernels.delta_norms(_to(new, device), _to(old, device))
    assert got.device.type == device
    torch.testing.assert_close(got.cpu().double(), select_ref.delta_norms(new, old), rtol=2e-6, atol=0.0)


def test_normalize_is_rms():
    new, old = [torch.full((4, 25), 3.0), torch.full((1,), 2.0)], [torch.zeros(4, 25), torch.zeros(1)]
    assert fedkernels.delta_norms(new, old).tolist() == [30.0, 2.0]
    assert fedkernels.delta_norms(new, old, normalize=True).tolist() == [3.0, 2.0]


def test_non_contiguous(device):
    g = torch.Generator().manual_seed(5)
    base_new, base_old = torch.randn(300, 90, generator=g), torch.randn(300, 90, generator=g)
    new = [base_new.t(), base_new[::3, 1::2], base_new[:, 7]]
    old = [base_old.t(), base_old[::3, 1::2], base_old[:, 7]]
    assert not any(t.is_contiguous() for t in new)
    got = fedkernels.delta_norms(_to(new, device), _to(old, device))
    torch.testing.assert_close(got.cpu().double(), select_ref.delta_norms(new, old), rtol=2e-6, atol=0.0)


def test_nan_and_inf():
    new = [
        torch.tensor([1.0, float("nan")]),
        torch.tensor([float("inf"), 0.0]),
        torch.tensor([float("inf")]),
        torch.tensor([3.0, 4.0]),
    ]
    old = [torch.zeros(2), torch.zeros(2), torch.tensor([float("inf")]), torch.zeros(2)]
    got = fedkernels.delta_norms(new, old)
    assert math.isnan(got[0]) and got[1] == float("inf") and math.isnan(got[2]) and got[3] == 5.0
    # NaN ranks first, then inf, then the rest
    assert fedkernels.select_topk_tensors(new, old, 1.0).tolist() == [0, 2, 1, 3]


def test_empty_lists_and_tensors():
    assert fedkernels.delta_norms([], []).shape == (0,)
    assert fedkernels.select_topk_tensors([], [], 0.5).shape == (0,)
    got = fedkernels.delta_norms([torch.empty(0), torch.empty(3, 0)], [torch.empty(0), torch.empty(3, 0)], True)
    assert got.tolist() == [0.0, 0.0]


@given(pairs=tensor_pairs(max_tensors=12), num=st.integers(1, 1000), normalize=st.booleans())
def test_topk_matches_reference(pairs, num, normalize):
    new, old = pairs
    den = 1000
    fraction = num / den
    got = fedkernels.select_topk_tensors(new, old, fraction, normalize=normalize)
    k = select_ref.num_selected(len(new), num, den)
    assert got.dtype == torch.int64 and got.shape == (k,)
    assert fedkernels.num_selected(len(new), fraction) == k
    # ranked by the op's own float32 norms (checked against the reference above)
    norms = fedkernels.delta_norms(new, old, normalize=normalize).tolist()
    assert got.tolist() == select_ref.rank_order(norms)[:k]


def test_topk_on_device(device):
    g = torch.Generator().manual_seed(11)
    new = [torch.randn(s, generator=g) for s in (10, 3 * CHUNK, 1, 50)]
    old = [t + 0.01 * (i + 1) for i, t in enumerate(new)]
    got = fedkernels.select_topk_tensors(_to(new, device), _to(old, device), 0.5)
    assert got.device.type == device and got.tolist() == [1, 3]


def test_ties_go_to_smaller_index():
    new = [torch.ones(4), torch.full((1,), 2.0), torch.ones(4), torch.zeros(3), torch.full((4,), -1.0)]
    old = [torch.zeros(4)] * 1 + [torch.zeros(1), torch.zeros(4), torch.zeros(3), torch.zeros(4)]
    # norms: 2, 2, 2, 0, 2
    assert fedkernels.select_topk_tensors(new, old, 1.0).tolist() == [0, 1, 2, 4, 3]
    assert fedkernels.select_topk_tensors(new, old, 0.4).tolist() == [0, 1]


@pytest.mark.parametrize(
    "m, fraction, k",
    [(10, 0.3, 3), (10, 0.31, 4), (7, 1e-12, 1), (7, 1.0, 7), (161, 0.1, 17), (3, 2 / 3, 2), (1, 0.5, 1)],
)
def test_fraction_edges(m, fraction, k):
    new = [torch.full((2,), float(i)) for i in range(m)]
    old = [torch.zeros(2)] * m
    got = fedkernels.select_topk_tensors(new, old, fraction)
    assert got.tolist() == list(range(m - 1, m - 1 - k, -1))


def _pair():
    return [torch.randn(3, 2), torch.randn(5)], [torch.randn(3, 2), torch.randn(5)]


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda n, o: (n, o[:1]), ValueError, "same length"),
        (lambda n, o: (n, [o[0], torch.randn(6)]), ValueError, "shape"),
        (lambda n, o: (n, [o[0].t(), o[1]]), ValueError, "shape"),
        (lambda n, o: (n, [o[0].double(), o[1]]), ValueError, "dtype"),
        (lambda n, o: ([n[0], n[1].long()], [o[0], o[1].long()]), ValueError, r"new\[1\]"),
        (lambda n, o: ([n[0], n[1].to("meta")], o), ValueError, "device"),
    ],
)
def test_bad_input(mutate, exc, match):
    new, old = mutate(*_pair())
    with pytest.raises(exc, match=match):
        fedkernels.delta_norms(new, old)
    with pytest.raises(exc, match=match):
        fedkernels.select_topk_tensors(new, old, 0.5)


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5, float("nan")])
def test_bad_fraction(fraction):
    new, old = _pair()
    with pytest.raises(ValueError, match="fraction"):
        fedkernels.select_topk_tensors(new, old, fraction)


def test_opcheck_and_compile():
    new, old = _pair()
    new.append(torch.randn(2 * CHUNK + 1).half())
    old.append(torch.randn(2 * CHUNK + 1).half())
    torch.library.opcheck(torch.ops.fedkernels.delta_norms.default, (new, old, True))
    torch.library.opcheck(torch.ops.fedkernels.select_topk_tensors.default, (new, old, 0.5, False))
    norms = torch.compile(fedkernels.delta_norms, fullgraph=True)
    assert torch.equal(norms(new, old), fedkernels.delta_norms(new, old))
    topk = torch.compile(fedkernels.select_topk_tensors, fullgraph=True)
    assert torch.equal(topk(new, old, 0.5), fedkernels.select_topk_tensors(new, old, 0.5))


def test_deterministic_across_threads():
    g = torch.Generator().manual_seed(2)
    new = [torch.randn(s, generator=g) for s in (100_003, 7, 64 * CHUNK + 5, 3000)]
    new.append(torch.randn(40_000, generator=g).bfloat16())
    old = [(t.float() + 0.1 * torch.randn(t.shape, generator=g)).to(t.dtype) for t in new]
    old_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = fedkernels.delta_norms(new, old)
        torch.set_num_threads(2)
        b = fedkernels.delta_norms(new, old)
    finally:
        torch.set_num_threads(old_threads)
    assert torch.equal(a, b)


def test_gradients_match_reference():
    g = torch.Generator().manual_seed(4)
    new = [
        torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True),
        torch.randn(CHUNK + 9, generator=g, dtype=torch.float64, requires_grad=True),
    ]
    old = [torch.randn(t.shape, generator=g, dtype=torch.float64, requires_grad=True) for t in new]
    weights = torch.tensor([0.7, -1.3])
    for normalize in (False, True):
        got = torch.autograd.grad((fedkernels.delta_norms(new, old, normalize) * weights).sum(), new + old)
        ref = torch.stack(
            [(a - b).norm() / (math.sqrt(a.numel()) if normalize else 1.0) for a, b in zip(new, old, strict=True)]
        )
        want = torch.autograd.grad((ref * weights.double()).sum(), new + old)
        for x, y in zip(got, want, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-9)


def test_gradcheck():
    # The output is float32 by contract, so finite differences need a float32-sized step.
    g = torch.Generator().manual_seed(6)
    new = [torch.randn(3, 2, generator=g, dtype=torch.float64, requires_grad=True)]
    old = [torch.randn(3, 2, generator=g, dtype=torch.float64, requires_grad=True)]
    assert torch.autograd.gradcheck(
        lambda a, b: fedkernels.delta_norms([a], [b]).double(), (new[0], old[0]), eps=1e-3, atol=1e-3, rtol=1e-3
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_equals_float32_of_the_same_values(dtype):
    # Widening is exact and the lanes are the same, so the float32 copy gives the same bits
    # (this pins the CPU's vectorised float16 path to the shared per-item math).
    g = torch.Generator().manual_seed(8)
    new = [torch.randn(s, generator=g).to(dtype) for s in (3 * CHUNK + 11, 5, 1000)]
    old = [torch.randn(t.shape, generator=g).to(dtype) for t in new]
    got = fedkernels.delta_norms(new, old)
    assert torch.equal(got, fedkernels.delta_norms([t.float() for t in new], [t.float() for t in old]))
