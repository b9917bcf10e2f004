"""fedkernels.comm: run-length/Elias-gamma round trips, byte-exact layout, corrupt input, k-means."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels.comm import decode_runs, encode_runs, kmeans_1d, quantize_runs, read_header
from python_tests.reference import prox_ref


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    word = torch.int32 if a.dtype == torch.float32 else torch.int16
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(word), b.view(word))


@st.composite
def piecewise(draw):
    """Piecewise-constant float32 tensors with adversarial values (NaN, inf, -0.0, subnormals)."""
    special = st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-45, 3.4e38, 1.0])
    vals = draw(st.lists(st.one_of(special, st.floats(width=32)), min_size=0, max_size=30))
    lens = draw(st.lists(st.integers(1, 300), min_size=len(vals), max_size=len(vals)))
    flat = [v for v, n in zip(vals, lens, strict=True) for _ in range(n)]
    x = torch.tensor(flat, dtype=torch.float32)
    if draw(st.booleans()) and x.numel() % 2 == 0 and x.numel():
        x = x.reshape(2, -1)
    return x


@given(x=piecewise())
def test_float32_round_trip_is_bit_exact(x):
    data = encode_runs(x)
    assert _bits_equal(decode_runs(data), x)


@given(x=piecewise())
def test_layout_matches_reference_bytes(x):
    data = encode_runs(x)
    words = prox_ref.float32_words(x.reshape(-1).numpy())
    values, lengths = prox_ref.runs_of_bits(words)
    body = (
        b"FKRL"
        + struct.pack("<BBB", 2, 0, x.dim())
        + struct.pack(f"<{x.dim()}Q", *x.shape)
        + struct.pack("<Q", len(values))
        + struct.pack(f"<{len(values)}I", *values)
        + prox_ref.elias_gamma_bytes(lengths)
    )
    assert data == body + struct.pack("<I", zlib.crc32(body))  # version 2: CRC-32 trailer


@given(x=piecewise())
def test_float16_round_trip_is_the_half_rounding(x):
    got = decode_runs(encode_runs(x, "float16"))
    assert _bits_equal(got, x.half())


def test_adversarial_inputs():
    distinct = torch.arange(1000, dtype=torch.float32) * 0.5  # all distinct: 1000 runs of length 1
    data = encode_runs(distinct)
    assert read_header(data).runs == 1000 and _bits_equal(decode_runs(data), distinct)
    assert len(data) == 7 + 8 + 8 + 4 * 1000 + 125 + 4  # one gamma bit per run, 4 checksum bytes
    one_run = torch.full((3, 1_000_000), -2.5)
    data = encode_runs(one_run)
    assert read_header(data).runs == 1 and len(data) < 50 and _bits_equal(decode_runs(data), one_run)
    empty = torch.zeros(0, 7)
    assert decode_runs(encode_runs(empty)).shape == (0, 7)
    scalar = torch.tensor(3.0)
    assert _bits_equal(decode_runs(encode_runs(scalar)), scalar)


def test_prox_update_compresses():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(100_000, generator=g)
    u = fedkernels.prox_tv1d(z, 5.0)
    data = encode_runs(u)
    assert _bits_equal(decode_runs(data), u)
    assert len(data) < 4 * u.numel() / 10


def _reseal(data: bytes) -> bytes:
    """``data`` minus its trailer, with a correct CRC-32 appended: how a hostile sender gets past the
    checksum, so the checks behind it are tested too."""
    return data[:-4] + struct.pack("<I", zlib.crc32(data[:-4]))


@pytest.mark.parametrize(
    "mangle, match",
    [
        (lambda d: d[:3], "bad magic"),
        (lambda d: b"XXXX" + d[4:], "bad magic"),
        (lambda d: d[:4] + b"\x07" + d[5:], "version 7"),
        (lambda d: d[:4] + b"\x01" + d[5:-4], "version 1, this build reads only version 2"),
        (lambda d: d[:5] + b"\x09" + d[6:], "dtype code"),
        (lambda d: d[:6] + b"\x11" + d[7:], "17 dims"),
        (lambda d: d[:10], "truncated"),
        (lambda d: d[:-1], "checksum"),
        (lambda d: d + b"\x80", "checksum"),
        (lambda d: d[:20] + bytes([d[20] ^ 4]) + d[21:], "checksum"),
        (lambda d: _reseal(d[:-5] + d[-4:]), "run lengths|truncated"),
        (lambda d: _reseal(d[:-4] + b"\x80" + d[-4:]), "bits after its last run"),
        (lambda d: _reseal(d[:7] + struct.pack("<Q", 999) + d[15:]), "run lengths"),
        (lambda d: _reseal(d[:7] + struct.pack("<Q", 29) + d[15:]), "adding up to more"),
        (lambda d: _reseal(d[:15] + struct.pack("<Q", 31) + d[23:]), "31 runs for 30 elements"),
        (lambda d: _reseal(d[:15] + struct.pack("<Q", 0) + d[23:]), "0 runs for 30"),
        (lambda d: _reseal(d[:15] + struct.pack("<Q", 25) + d[23:]), "truncated: 25 run values"),
    ],
)
def test_corrupt_payloads_raise(mangle, match):
    x = torch.tensor([1.0, 1.0, 2.0, 3.0, 3.0, 3.0] * 5)
    with pytest.raises(ValueError, match=match):
        decode_runs(mangle(encode_runs(x)))


def test_bad_encode_args():
    with pytest.raises(ValueError, match="value_dtype"):
        encode_runs(torch.zeros(3), "int8")
    with pytest.raises(ValueError, match="x must have dtype"):
        encode_runs(torch.zeros(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="data must be bytes"):
        decode_runs("abc")


@given(vals=st.lists(st.floats(-100, 100), min_size=1, max_size=14), k=st.integers(1, 6), seed=st.integers(0, 1000))
def test_kmeans_is_optimal(vals, k, seed):
    w = np.random.default_rng(seed).integers(1, 20, size=len(vals)).astype(float)
    centres, labels, cost = kmeans_1d(torch.tensor(vals, dtype=torch.float64), torch.tensor(w), k)
    best = prox_ref.kmeans1d_slow(np.array(vals), w, k)
    assert cost <= best + 1e-9 * (1 + best) and cost >= best - 1e-9 * (1 + best)
    # the returned labelling achieves the returned cost
    c = centres.numpy()[labels.numpy()]
    assert abs(float((w * (np.array(vals) - c) ** 2).sum()) - cost) <= 1e-7 * (1 + cost)
    assert torch.all(centres[1:] >= centres[:-1])


def test_kmeans_large_is_fast_and_consistent():
    g = torch.Generator().manual_seed(2)
    v = torch.randn(20_000, generator=g, dtype=torch.float64)
    c8, _, cost8 = kmeans_1d(v, None, 8)
    c16, _, cost16 = kmeans_1d(v, None, 16)
    assert c8.numel() == 8 and c16.numel() == 16 and cost16 < cost8


def test_quantize_runs():
    x = torch.tensor([1.0, 1.0, 1.1, 3.0, 3.0, 1.05])
    q = quantize_runs(x, 2)
    assert torch.unique(q).numel() == 2
    assert torch.allclose(q, torch.tensor([1.0375, 1.0375, 1.0375, 3.0, 3.0, 1.0375]))  # run-length weighted
    assert torch.equal(quantize_runs(x, 10), x)
    with pytest.raises(ValueError, match="k must be >= 1"):
        quantize_runs(x, 0)
