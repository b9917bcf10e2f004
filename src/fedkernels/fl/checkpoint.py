"""Atomic checkpoints of a run: tensors as safetensors, everything else as JSON, never pickle.

One file holds both (the JSON rides in the safetensors header's metadata), so a single
``os.replace`` switches from the previous checkpoint to the next: a reader sees one or the
other, never a mix, whenever the writer is killed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from . import payload as pl

_META_KEY = "fedkernels.checkpoint"
FORMAT = 1


def save_checkpoint(path: str | Path, state: dict[str, torch.Tensor], meta: dict) -> None:
    """Write ``state`` and the JSON-able ``meta`` to ``path`` atomically (temp file, fsync, rename,
    fsync of the directory)."""
    path = Path(path)
    body = pl.encode(state, metadata={_META_KEY: json.dumps({"format": FORMAT, **meta}, allow_nan=True)})
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the previous checkpoint, if any, is still whole
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | Path, like: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict]:
    """Read a checkpoint whose tensors must have exactly the names, dtypes and shapes of ``like``.

    Raises:
        PayloadError: the file is not a checkpoint or does not fit ``like``.
    """
    data = Path(path).read_bytes()
    specs = {k: pl.TensorSpec(v.dtype, tuple(v.shape), finite=False) for k, v in like.items()}
    state = pl.decode(data, pl.PayloadSpec(specs, max_bytes=len(data)))
    meta_json = _read_metadata(data).get(_META_KEY)
    if meta_json is None:
        raise pl.PayloadError(f"{path} is not a fedkernels checkpoint (no {_META_KEY} metadata)")
    meta = json.loads(meta_json)
    if meta.get("format") != FORMAT:
        raise pl.PayloadError(f"{path} has checkpoint format {meta.get('format')}, expected {FORMAT}")
    return state, meta


def _read_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors header (already validated by ``decode``)."""
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n]).get("__metadata__", {}) or {}
