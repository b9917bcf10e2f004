"""Hand-built codec streams: the hostile-client audit's streams (format version 1, as found) and their
version-2 twins with a correct checksum (anyone can compute a CRC, so the checks behind it must hold
on their own), plus valid streams. ``python -m python_tests.fuzz.codec_streams`` writes them as the
fuzz seed corpus (``corpus/codec/*.bin``); the tests read the files."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus" / "codec"


def stream(
    shape: list[int],
    runs: int,
    values: bytes = b"",
    bits: bytes = b"",
    *,
    version: int = 2,
    code: int = 0,
    seal: bool | None = None,
) -> bytes:
    """A stream with these header claims and sections, taken at their word; sealed with a correct
    CRC-32 trailer (default: for version 2)."""
    body = (
        b"FKRL"
        + struct.pack("<BBB", version, code, len(shape))
        + struct.pack(f"<{len(shape)}Q", *shape)
        + struct.pack("<Q", runs)
        + values
        + bits
    )
    return body + struct.pack("<I", zlib.crc32(body)) if (version == 2 if seal is None else seal) else body


def v2(v1_stream: bytes) -> bytes:
    """A version-1 stream's claims as version 2 with a correct checksum."""
    body = v1_stream[:4] + b"\x02" + v1_stream[5:]
    return body + struct.pack("<I", zlib.crc32(body))


# The audit's findings, as version-1 streams (literal where the audit gave the bytes).
AUDIT_V1 = {
    # 28 bytes: shape [2^33 + 1], one run of length 1 (the audit's literal stream).
    "audit_28B_shape_2pow33": b"FKRL\x01\x00\x01\x01\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"
    b"\x00\x00\x00\xc0\x80",
    # 24 bytes: runs = 0 for 1.35e9 elements (5.4 GB filled before the ValueError).
    "audit_24B_zero_runs": stream([1_350_000_000], 0, bits=b"\x00", version=1),
    # 35 bytes uploaded for an [8] bias: one run, shape [6e8] (2.4 GB before the shape was compared).
    "audit_35B_bias_bomb": stream([600_000_000], 1, struct.pack("<f", 1.0), b"\x80" + bytes(7), version=1),
    # 36 bytes: shape product >= 2^64 (TypeError from decode_runs).
    "audit_36B_numel_2pow64": stream([1 << 32, 1 << 32], 1, struct.pack("<f", 1.0), b"\x80", version=1),
    # a zero dimension beside huge ones (RuntimeError from torch.empty).
    "audit_zero_beside_huge": stream([0, 1 << 62, 1 << 62], 0, version=1),
    # a large claim (MemoryError): 2^40 elements, the old decoder's own limit.
    "audit_large_claim": stream([1 << 40], 1, struct.pack("<f", 2.0), b"\x00" * 5 + b"\x80" + bytes(5), version=1),
}

# Other hostile claims the decoder must refuse before allocating (version 2, sealed).
HOSTILE_V2 = {
    "huge_runs_count": stream([1 << 20], (1 << 64) - 1, struct.pack("<f", 1.0), b"\x80"),
    "runs_values_past_end": stream([1 << 20], 1 << 19, struct.pack("<f", 1.0), b"\x80"),
    "seventeen_dims": stream([1] * 16, 1, struct.pack("<f", 1.0), b"\x80")[:6]
    + b"\x11"
    + stream([1] * 16, 1, struct.pack("<f", 1.0), b"\x80")[7:],
    "max_u64_dims": stream([(1 << 64) - 1, 1], 1, struct.pack("<f", 1.0), b"\x80"),
    "one_dim_2pow63": stream([1 << 63], 1, struct.pack("<f", 1.0), b"\x80"),
    "gamma_64_zeros": stream([4], 1, struct.pack("<f", 1.0), bytes(9) + b"\x80"),
}

# Well-formed, but its values are NaN: refused only where finite values are required (the server).
NAN_F16 = stream([3], 1, struct.pack("<H", 0x7E00), b"\x60", code=1)


def valid_streams() -> dict[str, bytes]:
    """Valid streams (what encode_runs writes for small tensors), so mutations start from real data."""
    import torch

    from fedkernels.comm import encode_runs

    return {
        "valid_f32_6": encode_runs(torch.tensor([0.5, 0.5, 0.5, -1.0, 0.0, 0.0])),
        "valid_f16_2x3": encode_runs(torch.tensor([[1.0, 1.0, -2.0], [-2.0, -2.0, 65504.0]]), "float16"),
        "valid_empty_0x7": encode_runs(torch.zeros(0, 7)),
        "valid_scalar": encode_runs(torch.tensor(3.0)),
        "valid_f32_long_run": encode_runs(torch.tensor([-2.5] * 993 + [7.0] * 7)),
        "valid_f32_distinct": encode_runs(torch.arange(40, dtype=torch.float32).reshape(5, 8) * 0.25),
    }


def all_streams() -> dict[str, bytes]:
    out = {f"{k}.v1": v for k, v in AUDIT_V1.items()}
    out.update({f"{k}.v2": v2(v) for k, v in AUDIT_V1.items()})
    out.update(HOSTILE_V2)
    out["nan_value_f16"] = NAN_F16
    out.update(valid_streams())
    return out


def write_corpus() -> None:
    CORPUS.mkdir(parents=True, exist_ok=True)
    for name, data in all_streams().items():
        (CORPUS / f"{name}.bin").write_bytes(data)


if __name__ == "__main__":
    write_corpus()
