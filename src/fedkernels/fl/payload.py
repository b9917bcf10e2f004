"""Payloads: what crosses the network, as safetensors bytes (never pickle).

Client updates come from untrusted devices, so decoding first checks the safetensors header
itself (length, JSON, dtypes, shapes, byte ranges: no overlap, no gap, nothing past the body),
then the header's claims against a spec (names, dtypes, shapes, shared lengths, element counts)
*before any tensor is built*, and then every tensor's values (finiteness, id ranges, uniqueness)
before anything reaches the global state. A spec bounds the bytes it accepts (:meth:`PayloadSpec.byte_limit`),
so what a decode allocates is bounded by what the caller expects, whatever the sender claims.
Every rejection is a :class:`PayloadError`.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field

import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

Payload = dict[str, torch.Tensor]

DEFAULT_MAX_BYTES = 1 << 31
DEFAULT_MAX_HEADER_BYTES = 1 << 22

# safetensors dtype tags a payload may use, with their item sizes (the ones torch can hold).
_ITEM_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
    "C64": 8,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
# The torch dtype each tag decodes to (names, since older torch builds lack some of them).
_TORCH_DTYPE = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}
# Header bytes one tensor entry may take beyond its JSON-escaped name and its dims (dtype tag, the
# keys, two offsets of up to 20 digits), plus what a whole header may add (braces, padding to 8
# bytes, a small ``__metadata__`` some writers add).
_ENTRY_HEADER_BYTES = 128
_DIM_HEADER_BYTES = 21
_FIXED_HEADER_BYTES = 1024


class PayloadError(ValueError):
    """A payload was rejected; the message says why. The global state is never touched."""


def encode(payload: Payload, metadata: dict[str, str] | None = None) -> bytes:
    """Serialise named tensors to safetensors bytes (tensors are moved to CPU and made contiguous)."""
    for name, t in payload.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise PayloadError(
                f"payload entries must be str -> Tensor, got {type(name).__name__} -> {type(t).__name__}"
            )
    flat = {k: v.detach().to("cpu").contiguous() for k, v in payload.items()}
    return _st_save(flat, metadata=metadata)


_SIZES: dict[tuple, int] = {}  # payload signature -> its encoded length (encoded_size)


def encoded_size(payload: Payload, metadata: dict[str, str] | None = None) -> int:
    """``len(encode(payload, metadata))`` without serialising the values: the safetensors layout (8-byte
    length, JSON header, body) depends only on the names, dtypes, shapes and metadata, so the length is
    measured once per such signature by encoding zeros of those shapes, and looked up after that."""
    md = tuple(sorted((metadata or {}).items()))
    key = (md, *((n, t.dtype, tuple(t.shape)) for n, t in sorted(payload.items())))
    size = _SIZES.get(key)
    if size is None:
        zeros = {n: torch.zeros(t.shape, dtype=t.dtype, device="cpu") for n, t in payload.items()}
        size = len(encode(zeros, metadata=metadata))
        if len(_SIZES) >= 1024:  # a long run's payload shapes are few; keep the table bounded regardless
            _SIZES.clear()
        _SIZES[key] = size
    return size


@dataclass(frozen=True)
class TensorSpec:
    """What one tensor of a payload must look like.

    ``shape`` entries: an int (that exact size), ``None`` (any size) or a str naming a length that
    every tensor of the payload using the same name must share (e.g. ids ``("n",)`` and rows
    ``("n", d)``); ``shape=None`` means any shape. ``min_value`` (inclusive) and ``max_value``
    (exclusive) bound integer tensors, e.g. class ids; ``unique`` forbids repeated values.
    ``max_numel`` bounds the element count where the shape leaves it open (checked on the header's
    claim, before the tensor is built).
    """

    dtype: torch.dtype
    shape: tuple[int | str | None, ...] | None = None
    finite: bool = True
    min_value: int | None = None
    max_value: int | None = None
    unique: bool = False
    max_numel: int | None = None

    def max_bytes(self) -> int | None:
        """The most body bytes a tensor meeting this spec takes, or None if the spec leaves it open."""
        item = torch.empty((), dtype=self.dtype).element_size()
        bounds = []
        if self.shape is not None and all(type(d) is int for d in self.shape):
            bounds.append(math.prod(self.shape))  # type: ignore[arg-type]
        if self.max_numel is not None:
            bounds.append(self.max_numel)
        return min(bounds) * item if bounds else None

    def max_header_bytes(self, name: str) -> int:
        """The most safetensors-header bytes this tensor's entry can take."""
        ndim = len(self.shape) if self.shape is not None else 64
        return len(json.dumps(name)) + _ENTRY_HEADER_BYTES + _DIM_HEADER_BYTES * ndim


@dataclass
class PayloadSpec:
    """The tensors a payload must hold: ``required`` names exactly, plus ``optional`` ones.
    ``max_bytes`` bounds the whole payload and ``max_header_bytes`` its JSON header; a header
    bound of None (the default) is derived from the spec: room for exactly its tensors' entries
    and 1 KiB more (pass :data:`DEFAULT_MAX_HEADER_BYTES` or more to accept large ``__metadata__``)."""

    required: dict[str, TensorSpec]
    optional: dict[str, TensorSpec] = field(default_factory=dict)
    max_bytes: int = DEFAULT_MAX_BYTES
    allow_extra: bool = False
    max_header_bytes: int | None = None

    def header_limit(self) -> int:
        """The most JSON-header bytes a payload of this spec may have."""
        if self.max_header_bytes is not None:
            return self.max_header_bytes
        if self.allow_extra:
            return DEFAULT_MAX_HEADER_BYTES
        known = {**self.required, **self.optional}
        derived = _FIXED_HEADER_BYTES + sum(ts.max_header_bytes(n) for n, ts in known.items())
        return min(derived, DEFAULT_MAX_HEADER_BYTES)

    def byte_limit(self) -> int:
        """The most bytes a payload of this spec may have: ``max_bytes``, or less where every tensor's
        size is bounded by the spec (8-byte length + header limit + the tensors' largest sizes).
        This bounds what a decode allocates: the bytes, and the tensors built from them once."""
        known = {**self.required, **self.optional}
        sizes = [ts.max_bytes() for ts in known.values()]
        if self.allow_extra or any(b is None for b in sizes):
            return self.max_bytes
        return min(self.max_bytes, 8 + self.header_limit() + sum(sizes))  # type: ignore[arg-type]


def decode(data: bytes, spec: PayloadSpec | None = None) -> Payload:
    """Parse safetensors bytes into tensors and check them against ``spec``.

    Memory stays bounded by ``len(data)`` and, with a spec, by what the spec expects: the length is
    checked against :meth:`PayloadSpec.byte_limit`, and the header (declared sizes against the
    body, then names, dtypes, shapes and element counts against the spec) before any tensor is built.

    Raises:
        PayloadError: not safetensors, oversize, or a tensor with a wrong name, dtype, shape,
            non-finite value or out-of-range id. Never any other exception.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise PayloadError(f"payload must be bytes, got {type(data).__name__}")
    max_bytes = spec.byte_limit() if spec is not None else DEFAULT_MAX_BYTES
    if len(data) > max_bytes:
        raise PayloadError(f"payload of {len(data)} bytes exceeds the limit of {max_bytes}")
    data = bytes(data)
    entries = check_header(data, spec.header_limit() if spec is not None else DEFAULT_MAX_HEADER_BYTES)
    if spec is not None:
        check_claims(entries, spec)  # before safetensors builds a single tensor
    try:
        with torch.device("cpu"):  # safetensors makes empty tensors on torch's default device: keep them on the host
            tensors = _st_load(data)
    except Exception as e:  # safetensors raises its own error types for malformed input
        raise PayloadError(f"payload is not valid safetensors: {e}") from None
    if spec is not None:
        try:
            check(tensors, spec)
        except PayloadError:
            raise
        except Exception as e:  # e.g. a dtype torch cannot reduce over: still a rejection, never a crash
            raise PayloadError(f"payload could not be checked: {type(e).__name__}: {e}") from None
    return tensors


def check_header(data: bytes, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> dict[str, dict]:
    """Validate the safetensors framing of ``data`` without building tensors.

    Layout: 8-byte little-endian header length N, N bytes of JSON, then the body. Every tensor's
    ``data_offsets`` must lie in the body, match ``prod(shape) * itemsize``, and the ranges must
    tile the body exactly (no overlap, no gap). Returns the tensor entries of the header.
    """
    if len(data) < 8:
        raise PayloadError(f"payload is not valid safetensors: {len(data)} bytes is too short for a header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > max_header_bytes:
        raise PayloadError(
            f"payload is not valid safetensors: header of {n} bytes exceeds the limit of {max_header_bytes}"
        )
    if n > len(data) - 8:
        raise PayloadError(
            f"payload is not valid safetensors: header length {n} exceeds the {len(data) - 8} bytes after it"
        )
    try:
        header = json.loads(data[8 : 8 + n].decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise PayloadError(f"payload is not valid safetensors: header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise PayloadError("payload is not valid safetensors: header is not a JSON object")
    body = len(data) - 8 - n
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    ranges = [_check_entry(name, e, body) for name, e in entries.items()]
    end = 0
    for begin, stop, name in sorted(ranges):
        if begin != end:
            what = "overlaps another" if begin < end else "leaves a gap before it"
            raise PayloadError(
                f"payload is not valid safetensors: tensor {name!r} {what} (offset {begin}, expected {end})"
            )
        end = stop
    if end != body:
        raise PayloadError(f"payload is not valid safetensors: tensors cover {end} of {body} body bytes")
    return entries


def read_metadata(data: bytes) -> dict[str, str]:
    """The string entries of a safetensors header's ``__metadata__`` (call after :func:`decode` or
    :func:`check_header` accepted ``data``; anything that is not a string map reads as empty)."""
    n = int.from_bytes(bytes(data[:8]), "little")
    try:
        md = json.loads(bytes(data[8 : 8 + n])).get("__metadata__")
    except (ValueError, AttributeError, RecursionError):
        return {}
    if not isinstance(md, dict):
        return {}
    return {k: v for k, v in md.items() if isinstance(k, str) and isinstance(v, str)}


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate keys in header")
    return dict(pairs)


def _check_entry(name: str, e: object, body: int) -> tuple[int, int, str]:
    """One header entry's byte range ``(begin, end, name)``, checked against its dtype and shape."""
    bad = f"payload is not valid safetensors: tensor {name!r}"
    if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
        raise PayloadError(f"{bad} needs exactly dtype, shape and data_offsets")
    item = _ITEM_BYTES.get(e["dtype"]) if isinstance(e["dtype"], str) else None
    if item is None:
        raise PayloadError(f"{bad} has unsupported dtype {e['dtype']!r}")
    shape, offs = e["shape"], e["data_offsets"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise PayloadError(f"{bad} has an invalid shape {shape!r}")
    if not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs):
        raise PayloadError(f"{bad} has invalid data_offsets {offs!r}")
    begin, end = offs
    if not 0 <= begin <= end <= body:
        raise PayloadError(f"{bad} has data_offsets {offs} outside the body of {body} bytes")
    if math.prod(shape) * item != end - begin:
        raise PayloadError(
            f"{bad}: shape {shape} of {e['dtype']} needs {math.prod(shape) * item} bytes, "
            f"data_offsets give {end - begin}"
        )
    return begin, end, name


def check_claims(entries: dict[str, dict], spec: PayloadSpec) -> None:
    """Check the header's entries (from :func:`check_header`) against ``spec``: names, dtypes,
    shapes, shared lengths and element counts, before any tensor exists. Same messages as
    :func:`check`, which repeats these checks on the built tensors."""
    missing = sorted(set(spec.required) - set(entries))
    if missing:
        raise PayloadError(f"payload lacks tensors {missing}")
    known = {**spec.required, **spec.optional}
    extra = sorted(set(entries) - set(known))
    if extra and not spec.allow_extra:
        raise PayloadError(f"payload has unexpected tensors {extra}")
    lengths: dict[str, tuple[int, str]] = {}
    for name in sorted(entries):
        e, ts = entries[name], known.get(name)
        if ts is None:
            continue
        got = getattr(torch, _TORCH_DTYPE[e["dtype"]], None)
        if got != ts.dtype:
            raise PayloadError(f"tensor {name!r} has dtype {got or e['dtype']}, expected {ts.dtype}")
        if ts.shape is not None:
            _check_dims(name, tuple(e["shape"]), ts.shape, lengths)
        if ts.max_numel is not None and math.prod(e["shape"]) > ts.max_numel:
            raise PayloadError(f"tensor {name!r} has {math.prod(e['shape'])} elements, more than {ts.max_numel}")


def check(tensors: Payload, spec: PayloadSpec) -> None:
    """Check decoded tensors against ``spec``; raise :class:`PayloadError` naming the first problem."""
    missing = sorted(set(spec.required) - set(tensors))
    if missing:
        raise PayloadError(f"payload lacks tensors {missing}")
    known = {**spec.required, **spec.optional}
    extra = sorted(set(tensors) - set(known))
    if extra and not spec.allow_extra:
        raise PayloadError(f"payload has unexpected tensors {extra}")
    lengths: dict[str, tuple[int, str]] = {}  # shared length name -> (size, first tensor that set it)
    for name in sorted(tensors):
        t, ts = tensors[name], known.get(name)
        if ts is None:
            continue
        if t.dtype != ts.dtype:
            raise PayloadError(f"tensor {name!r} has dtype {t.dtype}, expected {ts.dtype}")
        if ts.shape is not None:
            _check_dims(name, tuple(t.shape), ts.shape, lengths)
        if ts.max_numel is not None and t.numel() > ts.max_numel:
            raise PayloadError(f"tensor {name!r} has {t.numel()} elements, more than {ts.max_numel}")
        inexact = t.is_floating_point() or t.is_complex()  # complex NaN/inf too (is_floating_point is False)
        if inexact and ts.finite and t.numel() and not _all_finite(t):
            raise PayloadError(f"tensor {name!r} has NaN or inf values")
        if not inexact and t.numel():
            if ts.min_value is not None and int(t.min()) < ts.min_value:
                raise PayloadError(f"tensor {name!r} has values below {ts.min_value}")
            if ts.max_value is not None and int(t.max()) >= ts.max_value:
                raise PayloadError(f"tensor {name!r} has values >= {ts.max_value}")
        if ts.unique and t.numel() and _has_repeats(t, ts):
            raise PayloadError(f"tensor {name!r} has repeated values")


def _has_repeats(t: torch.Tensor, ts: TensorSpec) -> bool:
    """Whether ``t`` repeats a value. Integer ids already checked to lie in a range not much wider
    than their count are marked in a bitmap of the range, one O(n + range) pass with range bytes of
    memory (cheaper than a sort even for large requests); anything else is sorted."""
    if not (t.is_floating_point() or t.is_complex()) and ts.min_value is not None and ts.max_value is not None:
        span = ts.max_value - ts.min_value
        if 0 < span <= max(4 * t.numel(), 1 << 16):
            idx = t.reshape(-1).to(torch.int64)  # no copy for int64 ids
            if ts.min_value:
                idx = idx - ts.min_value
            seen = torch.zeros(span, dtype=torch.bool, device=t.device)
            seen[idx] = True
            return int(seen.sum()) != t.numel()
    return t.numel() != torch.unique(t).numel()


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN or inf in ``t``. A sum is finite only if every term is (IEEE addition never turns
    inf/NaN back into a number), so one allocation-free pass settles the usual case; a non-finite
    sum may just be overflow, so then check element-wise."""
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def _check_dims(
    name: str, shape: tuple[int, ...], want: tuple[int | str | None, ...], lengths: dict[str, tuple[int, str]]
) -> None:
    if len(shape) != len(want) or any(type(w) is int and w != g for w, g in zip(want, shape, strict=True)):
        raise PayloadError(f"tensor {name!r} has shape {shape}, expected {want}")
    for w, g in zip(want, shape, strict=True):
        if isinstance(w, str):
            size, first = lengths.setdefault(w, (int(g), name))
            if size != g:
                raise PayloadError(f"tensor {name!r} has {w} = {g} but tensor {first!r} has {w} = {size}")


def state_spec(state: Payload, names: list[str] | None = None) -> dict[str, TensorSpec]:
    """Specs that require exactly the dtypes and shapes of ``state`` (optionally only ``names``)."""
    keys = names if names is not None else list(state)
    return {k: TensorSpec(state[k].dtype, tuple(state[k].shape)) for k in keys}
