"""Hostile clients for load tests of fedkernels over Flower, through Flower's public API only.

A ClientApp mod (:func:`hostile_mod`, Flower's ``ClientApp(mods=...)`` hook) lets the honest client
app answer, then turns some train replies into faults, a pure function of ``(seed, round,
client)`` (:func:`fault_of`, each kind ``rate / 5``):

- ``crash``: the ClientApp raises (the node sends Flower's error reply);
- ``empty``: the reply carries no upload;
- ``garbage``: every array's bytes overwritten (no longer NumPy ``.npy`` bytes);
- ``oversized``: an extra array of :data:`OVERSIZE` bytes (over any upload limit of the tiny models);
- ``bomb``: an array whose ``.npy`` header claims 2^40 elements and holds 8 bytes (and for the
  l1-difference strategy, a codec stream claiming 2^33 elements in a well-formed uint8 array).

The server must refuse each before building a tensor from it, fail only that client, and end
bit-identical to the in-process run in which the faulty clients send nothing
(:func:`silent_where_faulty`).
"""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MessageType

from ..fl.client import ClientEndpoint
from ..fl.seeding import numpy_rng
from ..integrations.flower import PAYLOAD

KINDS = ("crash", "empty", "garbage", "oversized", "bomb")
OVERSIZE = 1 << 20
# A version-1 l1-difference codec stream (28 bytes) claiming a tensor of 2^33 + 1 elements.
CODEC_BOMB = b"FKRL\x01\x00\x01\x01\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x80"


def fault_of(seed: int, round: int, client: int, rate: float) -> str | None:
    """The fault of ``client`` in ``round`` (0-based): one of :data:`KINDS` or None."""
    u = float(numpy_rng(seed, "flower-fault", round, client).random())
    return KINDS[int(u * len(KINDS) / rate)] if u < rate else None


def _npy(shape: tuple[int, ...], dtype: str, body: bytes) -> bytes:
    """``.npy`` bytes whose header claims ``shape`` of ``dtype``, followed by ``body`` (any length)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
    return header.getvalue() + body  # (the header writer writes the magic too)


def _tamper(kind: str, record: ArrayRecord, l1diff: bool) -> ArrayRecord:
    arrays = dict(record.items())
    if kind == "garbage":
        return ArrayRecord({n: Array(a.dtype, a.shape, a.stype, b"\x07" * len(a.data)) for n, a in arrays.items()})
    if kind == "oversized":
        arrays["padding"] = Array(np.zeros(OVERSIZE, dtype=np.uint8))
        return ArrayRecord(arrays)
    first = sorted(arrays)[0]
    if l1diff:  # a well-formed array holding a hostile codec stream
        arrays[first] = Array(np.frombuffer(CODEC_BOMB, dtype=np.uint8).copy())
    else:  # a header claiming 2^40 float32 elements, 8 bytes of body
        arrays[first] = Array("float32", (1 << 40,), "numpy.ndarray", _npy((1 << 40,), "float32", bytes(8)))
    return ArrayRecord(arrays)


def hostile_mod(seed: int, rate: float, l1diff: bool = False) -> Callable[[Message, Context, Callable], Message]:
    """A Flower ClientApp mod turning train replies into faults where :func:`fault_of` says so."""

    def mod(message: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        if message.metadata.message_type != MessageType.TRAIN:
            return call_next(message, context)
        round = int(message.metadata.group_id) - 1
        kind = fault_of(seed, round, int(context.node_config["partition-id"]), rate)
        if kind == "crash":
            raise RuntimeError("load-test crash")
        reply = call_next(message, context)
        if kind is None or reply.has_error() or PAYLOAD not in reply.content:
            return reply
        if kind == "empty":
            del reply.content[PAYLOAD]
        else:
            reply.content[PAYLOAD] = _tamper(kind, reply.content[PAYLOAD], l1diff)  # type: ignore[arg-type]
        return reply

    return mod


class _Silent:
    """An in-process client that sends nothing in the rounds where it is faulty."""

    def __init__(self, inner: ClientEndpoint, client: int, seed: int, rate: float) -> None:
        self.inner, self.client, self.seed, self.rate = inner, client, seed, rate

    def request(self, round: int, seed: int) -> bytes | None:
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        if fault_of(self.seed, round, self.client, self.rate):
            return None
        return self.inner.update(download, round, seed)


def silent_where_faulty(seed: int, rate: float) -> Callable[[int, ClientEndpoint], ClientEndpoint]:
    """The in-process ``client_wrapper`` of the reference run: faulty clients send nothing."""
    return lambda client, inner: _Silent(inner, client, seed, rate)
