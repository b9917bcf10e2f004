"""Property-based fuzzing of the run-length codec's decoder from a seed corpus (corpus/codec/*.bin:
the hostile-client audit's streams, hostile headers behind a valid checksum, and valid streams).

Each example takes a seed, applies a few mutations (bit flips, byte writes, inserts, deletes,
header fields overwritten with extreme values, splices of another seed) and usually re-seals the
checksum, as a hostile sender would, so the checks behind the CRC are reached. The decoder must
raise ValueError or return a tensor that keeps the stream's word within the caller's bounds; an
unsealed mutation that decodes must have left a seed unchanged (else the CRC collided). Bounded:
300 examples, each decode capped at 2^20 elements (about a second in all)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.comm import decode_runs, read_header
from python_tests.fuzz.codec_streams import AUDIT_V1, CORPUS, HOSTILE_V2

SEEDS = {p.stem: p.read_bytes() for p in sorted(Path(CORPUS).glob("*.bin"))}
MAX_NUMEL = 1 << 20
EXTREME_U64 = [0, 1, 2, 3, 255, 1 << 20, (1 << 31) - 1, 1 << 32, (1 << 62) + 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def _decode(data: bytes, **kw) -> torch.Tensor | None:
    """The decoded tensor, or None on ValueError (any other exception fails the test)."""
    try:
        return decode_runs(data, max_numel=MAX_NUMEL, **kw)
    except ValueError as e:
        assert str(e).startswith("data "), e  # the message names the argument
        return None


def _reseal(data: bytes) -> bytes:
    return data[:-4] + struct.pack("<I", zlib.crc32(data[:-4])) if len(data) >= 4 else data


def test_corpus_holds_the_audit_streams():
    for name in AUDIT_V1:
        assert f"{name}.v1" in SEEDS and f"{name}.v2" in SEEDS
    assert set(HOSTILE_V2) <= set(SEEDS) and sum(n.startswith("valid_") for n in SEEDS) >= 5


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed(name):
    got = _decode(SEEDS[name])
    assert (got is not None) == (name.startswith("valid_") or name == "nan_value_f16"), name


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_every_truncation_and_extension_of_a_seed(name):
    data = SEEDS[name]
    for end in range(len(data)):
        assert _decode(data[:end]) is None
        assert _decode(_reseal(data[:end])) is None or name.startswith("valid_")
    for extra in (b"\x00", b"\x80", b"\x00" * 8):
        assert _decode(data + extra) is None


MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 1 << 16), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 12)),
    st.tuples(st.just("u64"), st.integers(0, 4), st.sampled_from(EXTREME_U64)),  # a shape dim or the run count
    st.tuples(st.just("byte"), st.integers(4, 6), st.integers(0, 255)),  # version, dtype code, ndim
    st.tuples(st.just("splice"), st.sampled_from(sorted(SEEDS)), st.integers(0, 1 << 16)),
)


def _mutate(data: bytes, op: tuple) -> bytes:
    kind, a, b = op
    buf = bytearray(data)
    if not buf and kind not in ("insert", "splice"):
        return data
    if kind == "flip":
        buf[a % len(buf)] ^= 1 << b
    elif kind == "set":
        buf[a % len(buf)] = b
    elif kind == "insert":
        buf[a % (len(buf) + 1) : a % (len(buf) + 1)] = b
    elif kind == "delete":
        del buf[a % len(buf) : a % len(buf) + b]
    elif kind == "u64":
        at = 7 + 8 * a
        if at + 8 <= len(buf):
            buf[at : at + 8] = struct.pack("<Q", b)
    elif kind == "byte":
        if a < len(buf):
            buf[a] = b
    else:  # splice: our head, another seed's tail
        cut = b % (len(buf) + 1)
        other = SEEDS[a]
        buf = buf[:cut] + other[cut % (len(other) + 1) :]
    return bytes(buf)


def _seed_shape(seed: bytes) -> tuple[int, ...]:
    """The seed's own shape as a caller's expectation, where a caller could afford it."""
    try:
        shape = read_header(seed).shape
    except ValueError:
        return (8,)
    numel = 1
    for d in shape:
        numel *= d
    return shape if numel <= MAX_NUMEL else (8,)


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(SEEDS)),
    ops=st.lists(MUTATION, min_size=1, max_size=5),
    reseal=st.sampled_from([True, True, False]),
    expect=st.sampled_from([None, "seed", (8,), (2, 3), (), (0, 7), (1000,)]),
)
def test_mutated_seeds(name, ops, reseal, expect):
    seed = SEEDS[name]
    data = seed
    for op in ops:
        data = _mutate(data, op)
    if reseal:
        data = _reseal(data)
    shape = _seed_shape(seed) if expect == "seed" else expect
    got = _decode(data) if shape is None else _decode(data, expected_shape=shape)
    if got is None:
        return
    if not reseal:  # the checksum passed: only an unchanged seed gets here (a splice can give another)
        assert data in SEEDS.values()
    h = read_header(data)
    assert tuple(got.shape) == h.shape and (shape is None or tuple(got.shape) == tuple(shape))
    assert got.numel() <= MAX_NUMEL
    assert got.dtype == (torch.float32 if h.value_dtype == "float32" else torch.float16)
