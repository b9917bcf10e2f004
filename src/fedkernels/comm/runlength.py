"""Run-length + Elias-gamma codec of piecewise-constant tensors (the l1-difference update).

Layout (little-endian, version 2)::

    b"FKRL" | version u8 = 2 | value dtype u8 (0 float32, 1 float16) | ndim u8 | shape: ndim x u64
    | runs u64 | run values: runs x (4 or 2) bytes | run lengths: Elias-gamma codes, MSB first,
    zero-padded to a byte | CRC-32 of all bytes before it (``zlib.crc32``), u32

Runs are maximal stretches of bit-identical values of the flattened (row-major) tensor, so every
float32 value, -0.0 and NaN payloads included, comes back bit for bit. The 4-byte checksum is the
only overhead of version 2 over version 1 (which had none); version 1 streams are refused.

Streams are decoded from untrusted bytes. The compiled decoder checks the framing, the checksum,
the run count against the stream's length and the claimed shape against the caller's expected
shape (or ``max_numel``) before it allocates anything for the output, then allocates exactly the
output: memory <= expected tensor bytes + O(len(data)). Malformed data raises ``ValueError`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import _C

MAGIC = b"FKRL"
VERSION = 2
CHECKSUM_BYTES = 4
# Without an expected shape, a stream may claim at most this many elements (256 MiB of float32).
# A few dozen bytes can legitimately describe that much (one long run), so untrusted data should be
# decoded with ``expected_shape``; this bound only caps what a caller without a shape risks.
DEFAULT_MAX_NUMEL = 1 << 26
_DTYPES = {"float32": (0, torch.float32, torch.int32, 4), "float16": (1, torch.float16, torch.int16, 2)}
_BY_CODE = {v[0]: k for k, v in _DTYPES.items()}
_MAX_DIMS = 16
_INT64_MAX = (1 << 63) - 1

Bytes = bytes | bytearray | memoryview


@dataclass(frozen=True)
class RunHeader:
    """What the fixed-size front of an encoded update says."""

    value_dtype: str
    shape: tuple[int, ...]
    runs: int
    header_bytes: int


def encode_runs(x: torch.Tensor, value_dtype: str = "float32") -> bytes:
    """Encode a (piecewise-constant) tensor as run values plus Elias-gamma run lengths and a CRC-32.

    Args:
        x: float32 tensor of any shape (float16 also accepted with ``value_dtype="float16"``), on any
            device (it is copied to host memory: the codec works on bytes).
        value_dtype: ``"float32"`` (bit-exact) or ``"float16"`` (each value rounded to the nearest
            float16, ties to even, overflow to +-inf, before runs are formed, so runs that round to
            the same value merge; decoding gives exactly ``x.half()``).

    Returns:
        The encoded bytes (header, runs, 4-byte checksum); ``len()`` of it is the payload size.

    Example:
        >>> data = encode_runs(torch.tensor([0.5, 0.5, 0.5, -1.0, 0.0, 0.0]))
        >>> len(data), decode_runs(data)     # (40, tensor([ 0.5,  0.5,  0.5, -1.,  0.,  0.]))
    """
    if value_dtype not in _DTYPES:
        raise ValueError(f"value_dtype must be 'float32' or 'float16', got {value_dtype!r}")
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() > _MAX_DIMS:
        raise ValueError(f"x must have at most {_MAX_DIMS} dims, got {x.dim()}")
    code, dtype, word, _ = _DTYPES[value_dtype]
    allowed = (torch.float32,) if value_dtype == "float32" else (torch.float32, torch.float16)
    if x.dtype not in allowed:
        raise ValueError(
            f"x must have dtype {' or '.join(map(str, allowed))} for value_dtype={value_dtype!r}, got {x.dtype}"
        )
    words = x.detach().to("cpu", dtype).contiguous().reshape(-1).view(word)
    return _C.rle_encode(words.numpy().data.cast("B"), code, list(x.shape))  # .data: the memoryview


def _byte_view(data: object) -> memoryview:
    """``data`` as a flat memoryview of bytes, without copying (ValueError naming ``data`` if it is not
    bytes-like: bytes, bytearray, memoryview, or a 1-D uint8 CPU tensor)."""
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1 or data.device.type != "cpu":
            raise ValueError(
                f"data as a tensor must be 1-D uint8 on the CPU, got {data.dtype} {tuple(data.shape)} on {data.device}"
            )
        return data.contiguous().numpy().data.cast("B")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"data must be bytes, got {type(data).__name__}")
    view = memoryview(data)
    if not view.c_contiguous:
        raise ValueError("data must be a contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _dtype_code(expected_dtype: str | torch.dtype | None) -> int:
    if expected_dtype is None:
        return -1
    for name, (code, dtype, _, _) in _DTYPES.items():
        if expected_dtype in (name, dtype):
            return code
    raise ValueError(
        f"expected_dtype must be 'float32', 'float16', torch.float32, torch.float16 or None, got {expected_dtype!r}"
    )


def _shape_list(expected_shape: Sequence[int] | None) -> list[int] | None:
    if expected_shape is None:
        return None
    try:
        shape = [int(s) for s in expected_shape]
    except (TypeError, ValueError):
        raise ValueError(f"expected_shape must be a sequence of ints, got {expected_shape!r}") from None
    if len(shape) > _MAX_DIMS or any(not 0 <= s <= _INT64_MAX for s in shape):
        raise ValueError(f"expected_shape must have at most {_MAX_DIMS} dims in [0, 2**63), got {expected_shape!r}")
    return shape


def read_header(data: Bytes) -> RunHeader:
    """Parse and check the front of an encoded update (ValueError naming ``data`` if malformed).

    Checks the magic, version, dtype code, dims, that the shape's size fits in 63 bits, that the run
    count fits the shape and the run values fit the stream. The checksum is not checked here (it
    needs the whole stream): :func:`decode_runs` checks it.
    """
    code, shape, runs, header_bytes = _C.rle_read_header(_byte_view(data))
    return RunHeader(_BY_CODE[code], tuple(int(s) for s in shape), int(runs), int(header_bytes))


def decode_runs(
    data: Bytes | torch.Tensor,
    expected_shape: Sequence[int] | None = None,
    expected_dtype: str | torch.dtype | None = None,
    *,
    max_numel: int = DEFAULT_MAX_NUMEL,
    require_finite: bool = False,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Decode bytes from :func:`encode_runs` back to the tensor, checked (``data`` may come from anyone).

    Before anything is allocated for the output, the compiled decoder checks the framing, the CRC-32
    trailer, that the run count fits the shape and the run values fit the stream, the claimed shape
    against ``expected_shape`` (or its size against ``max_numel``), the value dtype against
    ``expected_dtype``, and with ``require_finite`` every run value. Only then is the output allocated
    (its exact size), so memory stays within the expected tensor's bytes plus O(len(data)), and time
    within O(len(data) + numel). Any malformed stream raises ``ValueError`` saying what is wrong.

    Args:
        data: the encoded bytes (bytes, bytearray, memoryview or a 1-D uint8 CPU tensor; not copied).
        expected_shape: the shape the caller expects; any other claimed shape is a ValueError.
        expected_dtype: ``"float32"``/``"float16"`` (or the torch dtypes): the value dtype the stream must hold.
        max_numel: with no ``expected_shape``, the most elements a stream may claim.
        require_finite: reject a stream with a NaN or infinite value (checked on the run values).
        out_dtype: ``None`` (the stream's value dtype) or ``torch.float32`` (float16 values widened
            exactly while decoding, with no float16 copy).

    Returns:
        The tensor of the claimed shape: float32, or float16 for float16 streams unless ``out_dtype``.

    Example:
        >>> x = torch.zeros(2, 3); x[1] = 4.0
        >>> torch.equal(decode_runs(encode_runs(x), expected_shape=(2, 3)), x)   # True
    """
    view = _byte_view(data)
    shape = _shape_list(expected_shape)
    code = _dtype_code(expected_dtype)
    if isinstance(max_numel, bool) or not isinstance(max_numel, int) or not 0 <= max_numel <= _INT64_MAX:
        raise ValueError(f"max_numel must be an int in [0, 2**63), got {max_numel!r}")
    if out_dtype not in (None, torch.float32):
        raise ValueError(f"out_dtype must be None or torch.float32, got {out_dtype!r}")
    got_code, got_shape, raw = _C.rle_decode(
        view, shape, code, max_numel, bool(require_finite), out_dtype == torch.float32
    )
    _, dtype, word, _ = _DTYPES[_BY_CODE[got_code]]
    if out_dtype is not None:
        dtype, word = torch.float32, torch.int32
    out_shape = tuple(int(s) for s in got_shape)
    if not raw:  # frombuffer refuses an empty buffer
        return torch.empty(out_shape, dtype=dtype)
    return torch.frombuffer(raw, dtype=word).view(dtype).reshape(out_shape)
