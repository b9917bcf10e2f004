"""Payloads as Flower ``ArrayRecord`` objects: the one place where fedkernels tensors become Flower
``Array`` objects and back.

Wire form: one ``Array`` per payload tensor, under the tensor's name, built as Flower builds them
(``stype = "numpy.ndarray"``, ``data`` = NumPy's ``.npy`` bytes), so that

- Flower chunks each array and de-duplicates identical chunks: a download that many clients
  receive is pushed to, and stored by, the SuperLink once;
- Flower's own tools read them (``Array.numpy()``, ``ArrayRecord.to_numpy_ndarrays()``, mods).

A download is converted once per distinct tensor (:class:`ArrayCache`), so every client that
receives the same tensors shares the same ``Array`` objects.

Receiving (:func:`record_to_bytes`) treats the record as untrusted and bounds it before building
anything, as :func:`fedkernels.fl.payload.decode` does a safetensors header: the array count, the
bytes held against the caller's limit, each array's ``stype``, and its ``.npy`` header (read without
loading: dtype, order, shape) against the ``Array``'s own ``dtype``/``shape`` and its byte length.
Only then are tensors made, as views of the received bytes, and serialised to the safetensors
bytes the round protocol checks against the strategy's spec (names, dtypes, shapes, values) and
counts, exactly as for the in-process transport; or (:func:`record_to_carried`, a cohort node's
uploads) copied out and handed over as tensors counted at those bytes' exact length, which the round
protocol checks the same way without the serialise-and-decode round trip. A ``.npy`` header is
parsed once per distinct header (the same bytes always declare the same), and written once per
dtype and shape. Every rejection is a :class:`~fedkernels.fl.payload.PayloadError`.

The bytes Flower itself receives are bounded by Flower's transport (its message size limit), not
here: these checks stop anything larger than the caller's limit before a tensor or a copy is made.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Mapping

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

from ...fl import payload as pl
from ...fl.round import Carried, tensor_identity

NUMPY_STYPE = "numpy.ndarray"  # Flower's serialisation type for NumPy's .npy bytes
MAX_ARRAYS = 4096  # a record with more arrays than this is refused before it is looked at
NPY_HEADER_MAX = 4096  # .npy magic + header bytes one array may hold (NumPy writes 64-128)
_NPY_MAGIC = b"\x93NUMPY"
# NumPy dtype strings a payload may carry (what torch can view without a copy), little-endian.
_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "complex64": torch.complex64,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_CACHE_MAX = 1024  # .npy headers remembered (each way); a run's dtypes and shapes are few
_SAVED_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}  # (dtype, shape) -> the header np.save writes
# a received .npy header (its bytes) -> what it declares: the same bytes always parse the same way
_READ_HEADERS: dict[bytes, tuple[str, int, tuple[int, ...], int]] = {}


def tensor_to_array(t: torch.Tensor) -> Array:
    """One tensor as a Flower ``Array`` (NumPy ``.npy`` bytes; CPU, C order): the bytes
    ``Array(ndarray)`` (``np.save``) makes, with the ``.npy`` header made once per dtype and shape.

    Raises:
        PayloadError: a dtype NumPy cannot hold (e.g. bfloat16): such a payload cannot travel
            as an ArrayRecord.
    """
    if t.dtype not in _NAMES:
        raise pl.PayloadError(f"tensor of dtype {t.dtype} cannot travel as a Flower Array (no NumPy dtype)")
    arr = t.detach().to("cpu").contiguous().numpy()  # (np.ascontiguousarray would make 0-d 1-d)
    shape = tuple(arr.shape)
    key = (arr.dtype.str, shape)
    head = _SAVED_HEADERS.get(key)
    if head is None:  # np.save itself, once: its header is what every later array of the key gets
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        data = buf.getvalue()
        if len(_SAVED_HEADERS) >= _CACHE_MAX:  # a run's shapes are few; bounded regardless
            _SAVED_HEADERS.clear()
        _SAVED_HEADERS[key] = data[: len(data) - arr.nbytes]
    else:
        data = b"".join((head, arr.data))  # one copy of the values (head + arr.tobytes() makes two)
    return Array(dtype=str(arr.dtype), shape=shape, stype=NUMPY_STYPE, data=data)


class ArrayCache:
    """Converts the tensors of many payloads, each distinct tensor once: payloads that share tensor
    objects (e.g. every client's copy of the global state) get the same ``Array`` objects.

    A tensor is the same while it is the same object at the same version (in-place writes bump
    it); the cache holds a reference to each tensor it saw, so an id is never reused while cached.
    Make one per round and drop it after.
    """

    def __init__(self) -> None:
        self._arrays: dict[tuple[int, object], tuple[torch.Tensor, Array]] = {}

    def array(self, t: torch.Tensor) -> Array:
        """``t`` as an ``Array``, shared with every earlier call for the same tensor."""
        key = tensor_identity(t)
        hit = self._arrays.get(key)
        if hit is None:
            hit = self._arrays[key] = (t, tensor_to_array(t))
        return hit[1]

    def __len__(self) -> int:
        return len(self._arrays)


def payload_to_record(payload: pl.Payload, cache: ArrayCache | None = None) -> ArrayRecord:
    """A payload (name -> tensor) as an ``ArrayRecord`` with one ``Array`` per tensor, in name
    order. With ``cache``, tensors already converted are shared, not copied."""
    convert = cache.array if cache is not None else tensor_to_array
    record = ArrayRecord()  # set one by one: ArrayRecord(dict) would copy every Array object
    for name in sorted(payload):
        record[name] = convert(payload[name])
    return record


def bytes_to_record(raw: bytes) -> ArrayRecord:
    """Safetensors payload bytes (what a :class:`~fedkernels.fl.client.ClientEndpoint` returns) as
    an ``ArrayRecord``.

    Raises:
        PayloadError: ``raw`` is not a valid payload.
    """
    return payload_to_record(pl.decode(raw))


def _header_end(data: bytes) -> int | None:
    """Where the ``.npy`` header of ``data`` ends, as its length field says (``None``: a version
    this does not know, or past :data:`NPY_HEADER_MAX` or the data; the full parse decides then)."""
    major = data[len(_NPY_MAGIC)] if len(data) > len(_NPY_MAGIC) else None
    if major == 1:
        end = 10 + int.from_bytes(data[8:10], "little")
    elif major in (2, 3):
        end = 12 + int.from_bytes(data[8:12], "little")
    else:
        return None
    return end if end <= min(NPY_HEADER_MAX, len(data)) else None


def _npy_header(name: str, data: bytes) -> tuple[str, int, tuple[int, ...], int]:
    """The dtype name, item size, shape and data offset the ``.npy`` bytes of array ``name``
    declare (not loaded). A header seen before (the same bytes) is looked up, not parsed again."""
    bad = f"array {name!r}"
    if data[: len(_NPY_MAGIC)] != _NPY_MAGIC:
        raise pl.PayloadError(f"{bad} is not NumPy .npy bytes")
    end = _header_end(data)
    key = data[:end] if end is not None else None
    hit = _READ_HEADERS.get(key) if key is not None else None
    if hit is not None:
        return hit
    fp = io.BytesIO(data[:NPY_HEADER_MAX])
    try:
        major, _minor = np.lib.format.read_magic(fp)
        if major == 1:
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp, max_header_size=NPY_HEADER_MAX)
        elif major in (2, 3):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp, max_header_size=NPY_HEADER_MAX)
        else:
            raise ValueError(f"unsupported .npy version {major}")
    except Exception as e:  # NumPy raises ValueError/SyntaxError/EOFError... on a malformed header
        raise pl.PayloadError(f"{bad} has a malformed .npy header ({type(e).__name__}: {e})") from None
    if fortran:
        raise pl.PayloadError(f"{bad} is in Fortran order")
    if dtype.hasobject or dtype.byteorder == ">" or dtype.fields is not None:
        raise pl.PayloadError(f"{bad} has dtype {dtype.str!r}, not a little-endian number type")
    out = (dtype.name, dtype.itemsize, tuple(shape), fp.tell())
    if key is not None and out[3] == len(key):  # only what parsed cleanly is remembered
        if len(_READ_HEADERS) >= _CACHE_MAX:
            _READ_HEADERS.clear()
        _READ_HEADERS[key] = out
    return out


def _check_array(name: str, arr: object) -> tuple[torch.dtype, tuple[int, ...], int]:
    """An untrusted ``Array``'s dtype, shape and data offset, checked for consistency (no tensor made)."""
    bad = f"array {name!r}"
    if not isinstance(arr, Array):
        raise pl.PayloadError(f"{bad} is not a Flower Array")
    if arr.stype != NUMPY_STYPE:
        raise pl.PayloadError(f"{bad} has stype {arr.stype!r}, expected {NUMPY_STYPE!r}")
    if not isinstance(arr.data, bytes):
        raise pl.PayloadError(f"{bad} holds no bytes")
    dname, itemsize, shape, offset = _npy_header(name, arr.data)
    want = _DTYPES.get(dname)
    if want is None:
        raise pl.PayloadError(f"{bad} has unsupported dtype {dname!r}")
    if arr.dtype != dname or tuple(arr.shape) != shape:
        raise pl.PayloadError(
            f"{bad} claims dtype {arr.dtype!r} shape {tuple(arr.shape)} but its .npy header says {dname!r} {shape}"
        )
    need = math.prod(shape) * itemsize
    if len(arr.data) - offset != need:
        raise pl.PayloadError(f"{bad}: shape {shape} of {dname} needs {need} bytes, it holds {len(arr.data) - offset}")
    return want, shape, offset


def record_to_payload(record: object, max_bytes: int = pl.DEFAULT_MAX_BYTES) -> pl.Payload:
    """An untrusted ``ArrayRecord`` as tensors, bounded before any is made.

    Args:
        record: what a message carried (anything: it is checked to be an ``ArrayRecord``).
        max_bytes: the most tensor bytes accepted (e.g. the strategy spec's byte limit).

    Returns:
        name -> tensor (read-only views of the record's bytes; clone before writing).

    Raises:
        PayloadError: not an ArrayRecord, too many arrays, more than ``max_bytes`` of data, or an
            array whose stype, ``.npy`` header, dtype, shape or length is wrong.
    """
    if not isinstance(record, ArrayRecord):
        raise pl.PayloadError(f"payload must be an ArrayRecord, got {type(record).__name__}")
    if len(record) > MAX_ARRAYS:
        raise pl.PayloadError(f"payload has {len(record)} arrays, more than {MAX_ARRAYS}")
    held = 0
    for name, arr in record.items():
        if not isinstance(name, str):
            raise pl.PayloadError("payload array names must be str")
        held += len(arr.data) if isinstance(arr, Array) and isinstance(arr.data, bytes) else 0
    if held > max_bytes + NPY_HEADER_MAX * len(record):  # refused before a header is parsed
        raise pl.PayloadError(f"payload of {held} bytes exceeds the limit of {max_bytes}")
    checked = {name: _check_array(name, arr) for name, arr in record.items()}
    total = sum(math.prod(s) * d.itemsize for d, s, _ in checked.values())
    if total > max_bytes:
        raise pl.PayloadError(f"payload of {total} bytes exceeds the limit of {max_bytes}")
    out: pl.Payload = {}
    for name, (dtype, shape, offset) in checked.items():
        data = record[name].data
        n = math.prod(shape)
        if n:
            with warnings.catch_warnings():  # read-only bytes: the views are never written (documented)
                warnings.simplefilter("ignore", UserWarning)
                flat = torch.frombuffer(data, dtype=dtype, count=n, offset=offset)
        else:
            flat = torch.empty(0, dtype=dtype, device="cpu")
        out[name] = flat.reshape(shape)
    return out


def record_to_bytes(
    record: object, max_bytes: int = pl.DEFAULT_MAX_BYTES, metadata: dict[str, str] | None = None
) -> bytes:
    """An untrusted ``ArrayRecord`` (bounded by :func:`record_to_payload`) as the safetensors bytes
    of its tensors, with ``metadata`` (e.g. the upload's round tag, which travels beside the record):
    what the round protocol decodes, checks against the strategy's spec and counts, as for a client
    in the same process.

    Raises:
        PayloadError: see :func:`record_to_payload`.
    """
    return pl.encode(record_to_payload(record, max_bytes), metadata=metadata)


def record_to_carried(
    record: object, max_bytes: int = pl.DEFAULT_MAX_BYTES, metadata: dict[str, str] | None = None
) -> Carried:
    """:func:`record_to_bytes` without the byte round trip: the tensors of an untrusted ``ArrayRecord``
    (bounded by :func:`record_to_payload` before any is made), copied out of the message, handed over
    as a :class:`~fedkernels.fl.round.Carried` counted at the exact length of the safetensors bytes
    :func:`record_to_bytes` would make (:func:`~fedkernels.fl.payload.encoded_size`). The round protocol
    applies the same byte limit, spec and strategy checks and round-tag check to it as to those bytes.

    Raises:
        PayloadError: see :func:`record_to_payload`.
    """
    payload = {name: t.clone() for name, t in record_to_payload(record, max_bytes).items()}
    return Carried(payload, pl.encoded_size(payload, metadata), dict(metadata or {}))


def payload_bytes(records: Mapping[str, object], key: str, max_bytes: int) -> bytes | None:
    """The ``ArrayRecord`` under ``key`` of a message's records as checked payload bytes, or ``None``
    when the message carries none (the client sent nothing)."""
    if key not in records:
        return None
    return record_to_bytes(records[key], max_bytes)
