"""Run-length + Elias-gamma codec of piecewise-constant tensors (the l1-difference update).

Layout (little-endian)::

    b"FKRL" | version u8 = 1 | value dtype u8 (0 float32, 1 float16) | ndim u8 | shape: ndim x u64
    | runs u64 | run values: runs x (4 or 2) bytes | run lengths: Elias-gamma codes, MSB first,
    zero-padded to a byte

Runs are maximal stretches of bit-identical values of the flattened (row-major) tensor, so every
float32 value, -0.0 and NaN payloads included, comes back bit for bit.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import torch

from .. import _C

MAGIC = b"FKRL"
VERSION = 1
_DTYPES = {"float32": (0, torch.float32, torch.int32, 4), "float16": (1, torch.float16, torch.int16, 2)}
_BY_CODE = {v[0]: k for k, v in _DTYPES.items()}
_MAX_DIMS = 16


@dataclass(frozen=True)
class RunHeader:
    """What the fixed-size front of an encoded update says."""

    value_dtype: str
    shape: tuple[int, ...]
    runs: int
    header_bytes: int


def encode_runs(x: torch.Tensor, value_dtype: str = "float32") -> bytes:
    """Encode a (piecewise-constant) tensor as run values plus Elias-gamma run lengths.

    Args:
        x: float32 tensor of any shape (float16 also accepted with ``value_dtype="float16"``), on any
            device (it is copied to host memory: the codec works on bytes).
        value_dtype: ``"float32"`` (bit-exact) or ``"float16"`` (each value rounded to the nearest
            float16, ties to even, overflow to +-inf, before runs are formed, so runs that round to
            the same value merge; decoding gives exactly ``x.half()``).

    Returns:
        The encoded bytes; ``len()`` of it is the payload size.

    Example:
        >>> data = encode_runs(torch.tensor([0.5, 0.5, 0.5, -1.0, 0.0, 0.0]))
        >>> len(data), decode_runs(data)     # (36, tensor([ 0.5,  0.5,  0.5, -1.,  0.,  0.]))
    """
    if value_dtype not in _DTYPES:
        raise ValueError(f"value_dtype must be 'float32' or 'float16', got {value_dtype!r}")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() > _MAX_DIMS:
        raise ValueError(f"x must have at most {_MAX_DIMS} dims, got {x.dim()}")
    code, dtype, word, size = _DTYPES[value_dtype]
    allowed = (torch.float32,) if value_dtype == "float32" else (torch.float32, torch.float16)
    if x.dtype not in allowed:
        raise ValueError(f"x must have dtype {' or '.join(map(str, allowed))} for value_dtype={value_dtype!r}, "
                         f"got {x.dtype}")
    words = x.detach().to("cpu", dtype).contiguous().reshape(-1).view(word)
    values, bits, runs = _C.rle_encode(memoryview(words.numpy()).cast("B"), size)
    head = MAGIC + struct.pack("<BBB", VERSION, code, x.dim()) + struct.pack(f"<{x.dim()}Q", *x.shape)
    return head + struct.pack("<Q", runs) + values + bits


def read_header(data: bytes) -> RunHeader:
    """Parse and check the front of an encoded update (ValueError naming ``data`` if malformed)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"data must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < 7 or data[:4] != MAGIC:
        raise ValueError("data is not a fedkernels run-length payload (bad magic)")
    version, code, ndim = struct.unpack_from("<BBB", data, 4)
    if version != VERSION:
        raise ValueError(f"data has codec version {version}, this build reads {VERSION}")
    if code not in _BY_CODE:
        raise ValueError(f"data has unknown value dtype code {code}")
    if ndim > _MAX_DIMS:
        raise ValueError(f"data claims {ndim} dims (corrupt)")
    end = 7 + 8 * ndim + 8
    if len(data) < end:
        raise ValueError("data is truncated inside its header")
    shape = struct.unpack_from(f"<{ndim}Q", data, 7)
    (runs,) = struct.unpack_from("<Q", data, 7 + 8 * ndim)
    return RunHeader(_BY_CODE[code], tuple(int(s) for s in shape), int(runs), end)


def decode_runs(data: bytes) -> torch.Tensor:
    """Decode bytes from :func:`encode_runs` back to the tensor (float32, or float16 in float16 mode).

    Payloads come from untrusted clients: every length and size is checked, and a corrupt or
    truncated payload raises ``ValueError`` rather than decoding to something else.

    Example:
        >>> x = torch.zeros(2, 3); x[1] = 4.0
        >>> torch.equal(decode_runs(encode_runs(x)), x)   # True
    """
    h = read_header(data)
    _, dtype, word, size = _DTYPES[h.value_dtype]
    numel = 1
    for s in h.shape:
        numel *= s
    data = bytes(data)
    values_end = h.header_bytes + h.runs * size
    if len(data) < values_end:
        raise ValueError("data is truncated inside its run values")
    raw = _C.rle_decode(data[h.header_bytes:values_end], data[values_end:], h.runs, numel, size)
    return torch.frombuffer(bytearray(raw), dtype=word).view(dtype).reshape(h.shape) if numel else \
        torch.empty(h.shape, dtype=dtype)
