"""Take a checkpoint apart and seal it again with a valid checksum, as anyone holding the project's
writer could: the tests and the fuzzer use it to hand the reader well-framed files whose fields lie."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load as st_load

from fedkernels.fl import checkpoint as ck
from fedkernels.fl import payload as pl


def unpack(raw: bytes) -> tuple[dict[str, torch.Tensor], str, bytes]:
    """``(state, metadata JSON, history bytes)`` of a checkpoint's bytes (no checks)."""
    tensors = st_load(raw)
    history = tensors.pop(ck.HISTORY).numpy().tobytes()
    return tensors, pl.read_metadata(raw)[ck._META_KEY], history


def seal(state: dict[str, torch.Tensor], meta_json: str, history: bytes) -> bytes:
    """A checkpoint of exactly these parts, with the checksum the reader expects over them."""
    tensors = {**state, ck.HISTORY: torch.frombuffer(bytearray(history), dtype=torch.uint8)}
    return pl.encode(tensors, metadata={ck._META_KEY: meta_json, ck._SUM_KEY: ck.checksum(tensors, meta_json)})


def reseal(raw: bytes, edit) -> bytes:
    """``raw`` with its metadata and history (as one dict, ``history`` included) passed through
    ``edit(meta) -> meta`` and sealed again. ``edit`` may return anything JSON can hold."""
    state, meta_json, history = unpack(raw)
    meta = json.loads(meta_json)
    meta["history"] = json.loads(history)
    new = edit(meta)
    if isinstance(new, dict) and "history" in new:
        hist = new.pop("history")
        return seal(state, json.dumps(new), json.dumps(hist).encode())
    return seal(state, json.dumps(new), history)
