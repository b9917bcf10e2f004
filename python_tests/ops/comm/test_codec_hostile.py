"""fedkernels.comm against hostile and damaged streams: the audit's memory bombs and wrong error types
(rejected with ValueError before anything is allocated, measured in a child process), the CRC-32
trailer (every single-bit flip detected, no damaged stream decodes to another tensor), exact round
trips, and the l1-difference server path passing each tensor's expected shape."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.comm import decode_runs, encode_runs, read_header
from fedkernels.comm.runlength import DEFAULT_MAX_NUMEL
from python_tests.fuzz.codec_streams import AUDIT_V1, HOSTILE_V2, NAN_F16, stream, v2
from python_tests.reference import prox_ref

AUDIT_28B = b"FKRL\x01\x00\x01\x01\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x80"


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _decode_or_value_error(data: bytes, **kw) -> torch.Tensor | None:
    """Decode, or None on ValueError; any other exception fails the test (by propagating)."""
    try:
        return decode_runs(data, **kw)
    except ValueError:
        return None


# ---- the audit's streams ---------------------------------------------------------------------


def test_audit_literal_stream_is_the_one_in_the_corpus():
    assert AUDIT_V1["audit_28B_shape_2pow33"] == AUDIT_28B and len(AUDIT_28B) == 28


@pytest.mark.parametrize("name", sorted(AUDIT_V1))
def test_audit_streams_rejected_as_version_1(name):
    with pytest.raises(ValueError, match="codec version 1, this build reads only version 2"):
        decode_runs(AUDIT_V1[name])


@pytest.mark.parametrize(
    "name, match",
    [
        ("audit_28B_shape_2pow33", "8589934593 elements .* more than max_numel"),
        ("audit_24B_zero_runs", "0 runs for 1350000000 elements"),
        ("audit_35B_bias_bomb", "600000000 elements .* more than max_numel"),
        ("audit_36B_numel_2pow64", r"shape \[4294967296, 4294967296\], whose size does not fit in 63 bits"),
        ("audit_zero_beside_huge", r"shape \[0, 4611686018427387904, 4611686018427387904\], whose size does not fit"),
        ("audit_large_claim", "1099511627776 elements .* more than max_numel"),
    ],
)
def test_audit_claims_rejected_behind_a_valid_checksum(name, match):
    """The same claims as version 2 with a correct CRC (an attacker computes one): refused by the
    size checks themselves, without an expected shape and with one."""
    data = v2(AUDIT_V1[name])
    with pytest.raises(ValueError, match=match):
        decode_runs(data)
    with pytest.raises(ValueError, match=r"claims (shape|0 runs)"):
        decode_runs(data, expected_shape=(8,))
    with pytest.raises(ValueError, match="claims"):
        decode_runs(data, max_numel=0)


@pytest.mark.parametrize(
    "name, match",
    [
        ("huge_runs_count", "18446744073709551615 runs for 1048576"),
        ("runs_values_past_end", "truncated: 524288 run values"),
        ("seventeen_dims", "17 dims"),
        ("max_u64_dims", "does not fit in 63 bits"),
        ("one_dim_2pow63", "does not fit in 63 bits"),
        ("gamma_64_zeros", "longer than 63 bits"),
    ],
)
def test_other_hostile_claims(name, match):
    with pytest.raises(ValueError, match=match):
        decode_runs(HOSTILE_V2[name], max_numel=1 << 62)


def test_expected_shape_dtype_and_finite_are_enforced():
    data = encode_runs(torch.tensor([1.0, 1.0, 2.0]))
    assert _same(decode_runs(data, expected_shape=(3,), expected_dtype="float32"), torch.tensor([1.0, 1.0, 2.0]))
    assert _same(
        decode_runs(data, expected_shape=torch.Size([3]), expected_dtype=torch.float32), torch.tensor([1.0, 1.0, 2.0])
    )
    with pytest.raises(ValueError, match=r"claims shape \[3\], expected \[1, 3\]"):
        decode_runs(data, expected_shape=(1, 3))
    with pytest.raises(ValueError, match="holds float32 values, expected float16"):
        decode_runs(data, expected_dtype="float16")
    with pytest.raises(ValueError, match=r"3 elements .* more than max_numel = 2"):
        decode_runs(data, max_numel=2)
    assert decode_runs(data, expected_shape=(3,), max_numel=0).shape == (3,)  # the shape is the bound
    assert bool(decode_runs(NAN_F16).isnan().all())
    with pytest.raises(ValueError, match="NaN or infinite value"):
        decode_runs(NAN_F16, require_finite=True)
    bad = encode_runs(torch.tensor([1.0, float("inf")]))
    assert decode_runs(bad)[1] == float("inf")
    with pytest.raises(ValueError, match="NaN or infinite value"):
        decode_runs(bad, require_finite=True)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(expected_shape=(-1,)), "expected_shape"),
        (dict(expected_shape=(1 << 63,)), "expected_shape"),
        (dict(expected_shape="ab"), "expected_shape"),
        (dict(expected_shape=(1,) * 17), "expected_shape"),
        (dict(expected_dtype="int8"), "expected_dtype"),
        (dict(max_numel=-1), "max_numel"),
        (dict(max_numel=1.5), "max_numel"),
        (dict(out_dtype=torch.float64), "out_dtype"),
    ],
)
def test_bad_decode_args(kw, match):
    with pytest.raises(ValueError, match=match):
        decode_runs(encode_runs(torch.zeros(2)), **kw)


@pytest.mark.parametrize(
    "data", ["abc", 3, None, [1, 2], torch.zeros(4), torch.zeros(2, 2, dtype=torch.uint8), memoryview(b"FKRL" * 8)[::2]]
)
def test_non_bytes_data_raises_value_error(data):
    with pytest.raises(ValueError, match="data"):
        decode_runs(data)


def test_every_bytes_like_input_decodes():
    x = torch.tensor([[4.0, 4.0], [-0.0, 5.0]])
    data = encode_runs(x)
    for form in (
        data,
        bytearray(data),
        memoryview(data),
        torch.frombuffer(bytearray(data), dtype=torch.uint8),
        memoryview(struct.pack(f"<{len(data)}B", *data)),
    ):
        assert _same(decode_runs(form, expected_shape=(2, 2)), x)


# ---- memory: measured in a child process -------------------------------------------------------

_CHILD = r"""
import json, os, resource, sys
import torch
from fedkernels.comm import decode_runs

def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":"))

# A new peak-RSS window (VmHWM := VmRSS; Linux >= 4.0), so the imports' peak cannot hide what is
# measured; returns the RSS it starts from, in MiB.
def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_kib("VmRSS") / 1024

def peak_mib():
    return status_kib("VmHWM") / 1024

def vm_bytes():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))

cases, control = json.loads(sys.stdin.read())
control = bytes.fromhex(control)  # a valid stream of 64 MiB of float32 (one run)
if not os.environ.get("FK_NO_RLIMIT"):
    # A bomb that slipped through fails loudly (MemoryError) instead of taking the machine.
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (384 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
base = reset_peak()
outcomes = []
for hexdata, kw in cases:
    try:
        decode_runs(bytes.fromhex(hexdata), **kw)
        outcomes.append("decoded")
    except BaseException as e:
        outcomes.append(f"{type(e).__name__}: {e}")
bombs = peak_mib() - base
base = reset_peak()
out = decode_runs(control, expected_shape=(1 << 24,))
control_growth = peak_mib() - base
print(json.dumps({"outcomes": outcomes, "bombs_mib": bombs, "control_mib": control_growth,
                  "control_ok": bool((out == -2.5).all())}))
"""


def _bomb_cases() -> list[tuple[bytes, dict]]:
    bombs = [AUDIT_28B, *AUDIT_V1.values(), *map(v2, AUDIT_V1.values()), *HOSTILE_V2.values()]
    # Claims that pass every size check but lie about the runs: the expected [8] tensor is the most
    # they may cost.
    liars = [stream([8], 1, struct.pack("<f", 1.0), b"\x80"), stream([8], 2, struct.pack("<2f", 1.0, 2.0), b"\xff")]
    cases = [(b, {}) for b in bombs] + [(b, {"expected_shape": [8]}) for b in bombs + liars]
    cases += [(NAN_F16, {"expected_shape": [3], "require_finite": True})]
    return cases


def test_bombs_allocate_nothing_measured_in_a_child():
    """Every hostile stream raises ValueError, and the child's peak RSS does not grow while they are
    decoded (< 16 MiB; the bombs claimed 1 GB to 4 TB); a valid 64 MiB decode afterwards grows it by
    64 MiB, which shows the measurement sees allocations and that a decode allocates the output
    once. The child runs under RLIMIT_AS = its size + 384 MiB,
    so a bomb that got through would fail there, not take the machine."""
    cases = _bomb_cases()
    env = dict(os.environ)
    if "asan" in env.get("LD_PRELOAD", ""):  # ASan reserves terabytes of address space: no RLIMIT_AS
        env["FK_NO_RLIMIT"] = "1"
    control = stream([1 << 24], 1, struct.pack("<f", -2.5), prox_ref.elias_gamma_bytes([1 << 24]))
    payload = json.dumps([[(b.hex(), kw) for b, kw in cases], control.hex()])
    res = subprocess.run(
        [sys.executable, "-c", _CHILD], input=payload, capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for (data, kw), outcome in zip(cases, got["outcomes"], strict=True):
        assert outcome.startswith("ValueError: data "), (data.hex(), kw, outcome)
    assert got["bombs_mib"] < 16, got
    assert got["control_ok"] and 60 < got["control_mib"] < 64 + 16, got


# ---- checksum: damaged streams -----------------------------------------------------------------


@st.composite
def piecewise(draw, max_runs: int = 12):
    """Small piecewise-constant tensors with special values, in float32 or float16 mode, any rank."""
    special = st.sampled_from([0.0, -0.0, float("nan"), float("inf"), -1.0, 1e-45, 3.4e38, 0.5])
    vals = draw(st.lists(st.one_of(special, st.floats(width=32)), min_size=0, max_size=max_runs))
    lens = draw(st.lists(st.integers(1, 40), min_size=len(vals), max_size=len(vals)))
    x = torch.tensor([v for v, n in zip(vals, lens, strict=True) for _ in range(n)], dtype=torch.float32)
    if x.numel() and draw(st.booleans()):
        x = x.reshape(draw(st.sampled_from([(1, -1), (-1, 1), (1, 1, -1)])))
    return x, draw(st.sampled_from(["float32", "float16"]))


@settings(max_examples=40)
@given(case=piecewise())
def test_every_single_bit_flip_is_detected(case):
    """CRC-32 catches every error burst of up to 32 bits, so every single-bit flip anywhere in the
    stream (header, values, lengths, padding or the trailer itself) is a ValueError."""
    x, value_dtype = case
    data = encode_runs(x, value_dtype)
    for bit in range(8 * len(data)):
        b = bytearray(data)
        b[bit // 8] ^= 0x80 >> (bit % 8)
        with pytest.raises(ValueError, match=r"^data "):
            decode_runs(bytes(b))


@given(
    case=piecewise(),
    flips=st.lists(st.integers(0, 1 << 30), min_size=2, max_size=12),
    cut=st.integers(-6, 6),
    seal=st.booleans(),
)
def test_damaged_streams_never_decode_to_another_tensor(case, flips, cut, seal):
    """Several flipped bits, a cut or extended end, and optionally a re-sealed checksum (a hostile
    sender): ValueError, or (unsealed) exactly the original tensor. A re-sealed stream that decodes is
    a well-formed stream and must honour its claims (shape, dtype, size bound)."""
    x, value_dtype = case
    data = bytearray(encode_runs(x, value_dtype))
    want = decode_runs(bytes(data))
    for f in flips:
        data[(f >> 3) % len(data)] ^= 0x80 >> (f & 7)
    data = data[:cut] if cut < 0 else data + bytes(range(cut))
    if seal and len(data) > 4:
        data = data[:-4] + struct.pack("<I", zlib.crc32(bytes(data[:-4])))
    got = _decode_or_value_error(bytes(data), max_numel=1 << 16)
    if got is None:
        return
    if not seal:
        assert _same(got, want)
    else:
        h = read_header(bytes(data))
        assert tuple(got.shape) == h.shape and got.numel() <= 1 << 16


@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_value_error(data):
    assert _decode_or_value_error(data) is None or data[:5] == b"FKRL\x02"


@st.composite
def forged_streams(draw):
    """Streams whose header fields are adversarial (huge, zero, mismatched) and whose checksum is
    usually right: they reach every check behind the CRC."""
    big = st.sampled_from([0, 1, 2, 7, 1 << 20, (1 << 31) + 1, 1 << 32, (1 << 62) + 3, 1 << 63, (1 << 64) - 1])
    dims = draw(st.lists(st.one_of(st.integers(0, 9), big), max_size=4))
    runs = draw(st.one_of(st.integers(0, 12), big))
    tail = draw(st.binary(max_size=64))
    return stream(dims, runs, tail, code=draw(st.sampled_from([0, 1])), seal=draw(st.booleans() | st.just(True)))


@given(data=forged_streams(), shape=st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=3)))
def test_forged_headers_raise_only_value_error(data, shape):
    got = _decode_or_value_error(data, expected_shape=shape, max_numel=1 << 16)
    if got is not None:  # a forged stream can be valid; then it keeps its word
        assert shape is None or list(got.shape) == shape
        assert got.numel() <= 1 << 16


# ---- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (0,), (1,), (0, 7), (3, 0, 2), (1, 1, 1), (5,), (2, 3, 4), (1,) * 16])
@pytest.mark.parametrize("value_dtype", ["float32", "float16"])
def test_round_trip_every_shape(shape, value_dtype):
    g = torch.Generator().manual_seed(len(shape))
    x = torch.randint(-2, 3, shape, generator=g).float() * 0.75
    data = encode_runs(x, value_dtype)
    want = x if value_dtype == "float32" else x.half()
    assert _same(decode_runs(data, expected_shape=shape, expected_dtype=value_dtype), want)
    assert _same(decode_runs(data, expected_shape=shape, out_dtype=torch.float32), want.float())
    assert read_header(data).shape == shape and zlib.crc32(data[:-4]) == struct.unpack("<I", data[-4:])[0]


@given(case=piecewise(max_runs=30))
def test_round_trip_exact_with_every_check_on(case):
    x, value_dtype = case
    data = encode_runs(x, value_dtype)
    want = x if value_dtype == "float32" else x.half()
    assert _same(decode_runs(data, expected_shape=x.shape, expected_dtype=value_dtype), want)
    widened = decode_runs(data, expected_shape=x.shape, out_dtype=torch.float32)
    # NaN bits aside (torch's own half -> float gives different NaN bits for 1 and for many elements)
    finite = ~want.float().isnan()
    assert widened.shape == want.shape and torch.equal(widened.isnan(), ~finite)
    assert torch.equal(_bits(widened[finite]), _bits(want.float()[finite]))
    if bool(torch.isfinite(want).all()):
        assert _same(decode_runs(data, expected_shape=x.shape, require_finite=True), want)
    else:
        with pytest.raises(ValueError, match="NaN or infinite"):
            decode_runs(data, require_finite=True)


def test_default_bound_and_its_override():
    """Without an expected shape, a valid stream of a few dozen bytes may still claim only
    DEFAULT_MAX_NUMEL elements; the caller can raise the bound."""
    big = stream(
        [DEFAULT_MAX_NUMEL + 1], 1, struct.pack("<f", 0.0), prox_ref.elias_gamma_bytes([DEFAULT_MAX_NUMEL + 1])
    )
    assert len(big) < 64 and read_header(big).shape == (DEFAULT_MAX_NUMEL + 1,)
    with pytest.raises(ValueError, match="more than max_numel = 67108864"):
        decode_runs(big)
    small = encode_runs(torch.zeros(1000))
    with pytest.raises(ValueError, match="more than max_numel = 999"):
        decode_runs(small, max_numel=999)
    assert decode_runs(small, max_numel=1000).numel() == 1000
