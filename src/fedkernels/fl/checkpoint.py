"""Atomic, integrity-checked checkpoints of a run: tensors as safetensors, everything else as JSON,
never pickle.

One file holds both (the JSON rides in the safetensors header's metadata), so a single
``os.replace`` switches from the previous checkpoint to the next: a reader sees one or the
other, never a mix, whenever the writer is killed. A SHA-256 over every tensor (name, dtype, shape,
bytes) and the JSON metadata is stored beside them and verified on load, so a flipped bit anywhere
is a ``ValueError`` naming the file, never a silently wrong resume. It detects damage, not forgery:
anyone who can write the file can recompute it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TypeGuard

import torch

from . import payload as pl

_META_KEY = "fedkernels.checkpoint"
_SUM_KEY = "fedkernels.checksum"
FORMAT = 2
MAX_ROUND = 2**31 - 1  # a round counter beyond this is implausible and refused
_RECORD_FIELDS = ("round", "clients", "failed", "bytes_down", "bytes_up")


def checksum(state: dict[str, torch.Tensor], meta_json: str) -> str:
    """Hex SHA-256 over the JSON metadata and every tensor (sorted by name: name, dtype, shape, bytes)."""
    h = hashlib.sha256()
    h.update(meta_json.encode())
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _temp_name(path: Path, pid: int) -> Path:
    return path.with_name(f".{path.name}.tmp-{pid}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    except (OverflowError, ValueError):
        return False
    return True


def clean_stale_temps(path: str | Path) -> list[Path]:
    """Remove temp files that an interrupted save of ``path`` left (``.<name>.tmp-<pid>`` whose
    writer process is gone). Returns what was removed. A live writer's temp file is left alone."""
    path = Path(path)
    removed: list[Path] = []
    prefix = f".{path.name}.tmp-"
    if not path.parent.is_dir():
        return removed
    for tmp in path.parent.iterdir():
        pid = tmp.name[len(prefix) :]
        if not tmp.name.startswith(prefix) or not pid.isascii() or not pid.isdigit():
            continue
        if int(pid) == os.getpid() or not _pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def save_checkpoint(path: str | Path, state: dict[str, torch.Tensor], meta: dict) -> None:
    """Write ``state`` and the JSON-able ``meta`` (with their checksum) to ``path`` atomically (temp
    file, fsync, rename, fsync of the directory). Stale temp files of earlier killed saves go first."""
    path = Path(path)
    clean_stale_temps(path)
    meta_json = json.dumps({"format": FORMAT, **meta}, allow_nan=True)
    body = pl.encode(state, metadata={_META_KEY: meta_json, _SUM_KEY: checksum(state, meta_json)})
    tmp = _temp_name(path, os.getpid())
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
        PayloadError: (a ``ValueError``) naming ``path``: the file is not a checkpoint, does not fit
            ``like``, fails its checksum, or has malformed metadata (the message names the field).
    """
    data = Path(path).read_bytes()
    specs = {k: pl.TensorSpec(v.dtype, tuple(v.shape), finite=False) for k, v in like.items()}
    try:
        state = pl.decode(data, pl.PayloadSpec(specs, max_bytes=len(data)))
    except pl.PayloadError as e:
        raise pl.PayloadError(f"checkpoint {path}: {e}") from None
    raw = _read_metadata(data)
    meta_json, stored_sum = raw.get(_META_KEY), raw.get(_SUM_KEY)
    if meta_json is None:
        raise pl.PayloadError(f"{path} is not a fedkernels checkpoint (no {_META_KEY} metadata)")
    meta = _parse_meta(meta_json, path)
    if meta.get("format") != FORMAT:
        raise pl.PayloadError(f"{path} has checkpoint format {meta.get('format')!r}, expected {FORMAT}")
    if stored_sum != checksum(state, meta_json):
        raise pl.PayloadError(f"checkpoint {path} fails its checksum ({_SUM_KEY}): the file is damaged")
    check_meta(meta, path)
    return state, meta


def _parse_meta(meta_json: str, path: str | Path) -> dict:
    try:
        meta = json.loads(meta_json)
    except ValueError as e:
        raise pl.PayloadError(f"checkpoint {path}: metadata field {_META_KEY!r} is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise pl.PayloadError(f"checkpoint {path}: metadata field {_META_KEY!r} must be a JSON object")
    return meta


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def check_meta(meta: dict, path: str | Path) -> None:
    """Field checks of a checkpoint's metadata: ``round`` an int in ``[0, MAX_ROUND]``, ``history``
    a list of ``round`` records numbered 0, 1, ... with the RoundRecord fields.

    Raises:
        PayloadError: naming ``path`` and the field.
    """
    rnd = meta.get("round")
    if not _is_int(rnd) or not 0 <= rnd <= MAX_ROUND:
        raise pl.PayloadError(f"checkpoint {path}: field 'round' must be an integer in [0, {MAX_ROUND}], got {rnd!r}")
    hist = meta.get("history")
    if not isinstance(hist, list) or len(hist) != rnd:
        got = f"{len(hist)} records" if isinstance(hist, list) else repr(type(hist).__name__)
        raise pl.PayloadError(
            f"checkpoint {path}: field 'history' must be a list of {rnd} records (one per round), got {got}"
        )
    for i, rec in enumerate(hist):
        if not isinstance(rec, dict) or any(f not in rec for f in _RECORD_FIELDS):
            raise pl.PayloadError(
                f"checkpoint {path}: field 'history[{i}]' must be a record with {', '.join(_RECORD_FIELDS)}"
            )
        if rec["round"] != i or not isinstance(rec["clients"], list) or not isinstance(rec["failed"], list):
            raise pl.PayloadError(f"checkpoint {path}: field 'history[{i}]' is malformed (round {rec['round']!r})")


def _read_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors header (already validated by ``decode``)."""
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]).get("__metadata__", {}) or {}
