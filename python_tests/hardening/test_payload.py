"""The payload decoder against malformed and hostile bytes: only PayloadError, never a crash,
never a tensor larger than the bytes it came from."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load as st_load

from fedkernels.fl.payload import PayloadError, PayloadSpec, TensorSpec, check_header, decode, encode

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def raw(header: dict, body: bytes = b"") -> bytes:
    """Hand-made safetensors bytes: length, JSON header, body."""
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


@st.composite
def payloads(draw) -> dict[str, torch.Tensor]:
    out = {}
    for i in range(draw(st.integers(0, 4))):
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        dtype = draw(st.sampled_from(DTYPES))
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
        t = (torch.randn(shape, generator=g) * 100).to(dtype)
        out[draw(st.text(min_size=1, max_size=8)) + str(i)] = t
    return out


def decode_or_reject(data: bytes, spec: PayloadSpec | None = None) -> dict[str, torch.Tensor] | None:
    """decode, with PayloadError as None; any other exception fails the test."""
    try:
        out = decode(data, spec)
    except PayloadError:
        return None
    assert sum(t.numel() * t.element_size() for t in out.values()) <= len(data)  # nothing bigger than the bytes
    return out


@given(payloads())
def test_round_trip(p):
    back = decode(encode(p))
    assert set(back) == set(p)
    for k in p:
        assert back[k].dtype == p[k].dtype and torch.equal(back[k], p[k])


@given(st.binary(max_size=300))
def test_arbitrary_bytes(data):
    decode_or_reject(data)


@given(payloads(), st.data())
def test_mutated_payloads(p, data):
    good = bytearray(encode(p))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = data.draw(st.integers(0, max(0, len(good) - 1)))
        if op == "flip" and good:
            good[pos] ^= data.draw(st.integers(1, 255))
        elif op == "insert":
            good[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del good[pos : pos + data.draw(st.integers(1, 8))]
        else:
            del good[pos:]
    decode_or_reject(bytes(good))


@given(payloads(), st.data())
def test_truncation_always_rejected(p, data):
    good = encode(p)
    cut = data.draw(st.integers(0, len(good) - 1))
    with pytest.raises(PayloadError, match="safetensors"):
        decode(good[:cut])


@st.composite
def headers(draw) -> bytes:
    """Header-shaped bytes with random (often inconsistent) dtypes, shapes and offsets."""
    body = draw(st.integers(0, 64))
    header = {}
    for i in range(draw(st.integers(0, 3))):
        begin = draw(st.integers(-2, body + 2))
        header[f"t{i}"] = {
            "dtype": draw(st.sampled_from(["F32", "I64", "U8", "BOOL", "F16", "Q4", 7])),
            "shape": draw(st.lists(st.integers(-1, 2**62), max_size=3)),
            "data_offsets": [begin, begin + draw(st.integers(-2, 40))],
        }
    if draw(st.booleans()):
        header["__metadata__"] = {"k": "v"}
    return raw(header, bytes(body))


@given(headers())
def test_our_header_check_is_never_looser_than_safetensors(data):
    """Whatever our header check accepts, safetensors must load into exactly the declared tensors."""
    try:
        entries = check_header(data)
    except PayloadError:
        return
    loaded = st_load(data)
    assert {k: list(v.shape) for k, v in loaded.items()} == {k: e["shape"] for k, e in entries.items()}
    decode_or_reject(data)


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "too short"),
        (struct.pack("<Q", 2**63) + b"{}", "header of"),
        (struct.pack("<Q", 1000) + b"{}", "exceeds the 2 bytes"),
        (struct.pack("<Q", 2) + b"\xff\xfe", "not JSON"),
        (raw([1, 2]), "not a JSON object"),  # type: ignore[arg-type]
        (struct.pack("<Q", 25) + b'{"a": 1, "a": 2}         ', "not JSON.*duplicate"),
        (raw({"x": {"dtype": "F32", "shape": [1]}}, bytes(4)), "exactly dtype, shape and data_offsets"),
        (raw({"x": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}}, bytes(4)), "unsupported dtype"),
        (raw({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, bytes(4)), "invalid shape"),
        (raw({"x": {"dtype": "F32", "shape": [1.0], "data_offsets": [0, 4]}}, bytes(4)), "invalid shape"),
        (raw({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}, bytes(4)), "invalid data_offsets"),
        (raw({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}, bytes(4)), "outside the body"),
        (raw({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, bytes(4)), "outside the body"),
        (raw({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(4)), "needs 8 bytes"),
        # A huge declared tensor backed by 4 bytes: rejected before any allocation.
        (raw({"x": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 4]}}, bytes(4)), "needs"),
        (
            raw(
                {
                    "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                    "y": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]},
                },
                bytes(8),
            ),
            "overlaps",
        ),
        (
            raw(
                {
                    "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                    "y": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                },
                bytes(4),
            ),
            "overlaps",
        ),
        (raw({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)), "gap"),
        (raw({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, bytes(12)), "cover 4 of 12"),
    ],
)
def test_header_edge_cases(data, match):
    with pytest.raises(PayloadError, match=match):
        decode(data)


def test_header_limit_from_spec():
    data = encode({"x": torch.zeros(3)})
    decode(data, PayloadSpec({"x": TensorSpec(torch.float32, (3,))}))
    with pytest.raises(PayloadError, match=r"header of .* exceeds the limit of 16"):
        decode(data, PayloadSpec({"x": TensorSpec(torch.float32, (None,))}, max_header_bytes=16))
    # A fully sized spec bounds the whole payload: 8-byte length + header limit + 12 body bytes.
    with pytest.raises(PayloadError, match=r"payload of 76 bytes exceeds the limit of 36"):
        decode(data, PayloadSpec({"x": TensorSpec(torch.float32, (3,))}, max_header_bytes=16))


def test_not_bytes():
    with pytest.raises(PayloadError, match="must be bytes"):
        decode("text")  # type: ignore[arg-type]


def test_pickle_is_never_unpickled(tmp_path):
    import os
    import pickle

    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with pytest.raises(PayloadError, match="safetensors"):
        decode(pickle.dumps({"w": Exploit()}))
    with pytest.raises(PayloadError):
        decode(torch_save_bytes({"w": torch.ones(2)}))
    assert not marker.exists()


def torch_save_bytes(obj) -> bytes:
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


IDS_ROWS = PayloadSpec(
    {
        "ids": TensorSpec(torch.int64, ("n",), min_value=0, max_value=10, unique=True),
        "rows": TensorSpec(torch.float32, ("n", 3)),
    },
    optional={"bias": TensorSpec(torch.float32, ("n",))},
    max_bytes=4096,
)


def ids_rows(n=4, **over) -> dict[str, torch.Tensor]:
    p = {"ids": torch.arange(n), "rows": torch.ones(n, 3)}
    p.update(over)
    return p


def test_spec_accepts_good():
    out = decode(encode(ids_rows(bias=torch.zeros(4))), IDS_ROWS)
    assert torch.equal(out["ids"], torch.arange(4))
    assert decode(encode(ids_rows(0)), IDS_ROWS)["rows"].shape == (0, 3)  # empty is fine


@pytest.mark.parametrize(
    "payload, match",
    [
        ({"rows": torch.ones(4, 3)}, r"lacks tensors \['ids'\]"),
        (ids_rows(extra=torch.ones(1)), r"unexpected tensors \['extra'\]"),
        (ids_rows(ids=torch.arange(4, dtype=torch.int32)), "'ids' has dtype torch.int32"),
        (ids_rows(rows=torch.ones(4, 2)), r"'rows' has shape \(4, 2\)"),
        (ids_rows(rows=torch.ones(4, 3, 1)), r"'rows' has shape \(4, 3, 1\)"),
        (ids_rows(rows=torch.ones(5, 3)), "'rows' has n = 5 but tensor 'ids' has n = 4"),
        (ids_rows(bias=torch.zeros(3)), "'ids' has n = 4"),
        (ids_rows(rows=torch.tensor([[0.0, float("nan"), 0]] * 4)), "'rows' has NaN or inf"),
        (ids_rows(rows=torch.tensor([[0.0, float("-inf"), 0]] * 4)), "'rows' has NaN or inf"),
        (ids_rows(ids=torch.tensor([0, 1, 2, 10])), "'ids' has values >= 10"),
        (ids_rows(ids=torch.tensor([0, 1, 2, 2**62])), "'ids' has values >= 10"),
        (ids_rows(ids=torch.tensor([0, -1, 2, 3])), "'ids' has values below 0"),
        (ids_rows(ids=torch.tensor([0, 1, 1, 3])), "'ids' has repeated values"),
        (ids_rows(4000), "exceeds the limit of 4096"),
    ],
)
def test_spec_rejects(payload, match):
    with pytest.raises(PayloadError, match=match):
        decode(encode(payload), IDS_ROWS)


@given(payloads(), st.sampled_from(DTYPES))
def test_spec_check_never_raises_other_errors(p, dtype):
    """Any decodable payload checked against any spec: accepted or PayloadError, nothing else."""
    spec = PayloadSpec(
        {k: TensorSpec(dtype, ("n",) * v.dim(), min_value=0, max_value=5, unique=True) for k, v in p.items()}
    )
    decode_or_reject(encode(p), spec)


@given(
    st.integers(1, 200),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
    st.sampled_from(["none", "nan", "inf", "-inf", "overflow"]),
    st.integers(0, 2**31),
)
def test_finite_check_is_exact(n, dtype, special, seed):
    """NaN/inf anywhere is rejected; finite values whose sum overflows are accepted."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g).to(dtype)
    pos = int(torch.randint(n, (1,), generator=g))
    if special == "overflow":
        x = torch.full((n,), torch.finfo(dtype).max, dtype=dtype)
    elif special != "none":
        x[pos] = float(special)
    spec = PayloadSpec({"x": TensorSpec(dtype, (n,))})
    if special in ("none", "overflow"):
        assert torch.equal(decode(encode({"x": x}), spec)["x"], x)
    else:
        with pytest.raises(PayloadError, match="NaN or inf"):
            decode(encode({"x": x}), spec)
