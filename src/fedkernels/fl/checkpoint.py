"""Atomic, integrity-checked checkpoints of a run: tensors as safetensors, everything else as JSON,
never pickle.

One file holds both, so a single ``os.replace`` switches from the previous checkpoint to the next:
a reader sees one or the other, never a mix, whenever the writer is killed. The small JSON (format,
round counter, run identity) rides in the safetensors header's metadata; the history, which grows
with every round, is a uint8 tensor in the body (``fedkernels.history``, compact JSON), so the
header stays small however long the run (the header is read whole before anything is checked, and
its size is bounded). A SHA-256 over every tensor (name, dtype, shape, bytes) and the JSON metadata
is stored beside them and verified on load, so a flipped bit anywhere is a ``ValueError`` naming
the file, never a silently wrong resume. It detects damage, not forgery: anyone who can write the
file can recompute it.

The writer runs the loader's own checks (:func:`check_file_bytes`) on the bytes it is about to
write, before they replace the previous checkpoint: a checkpoint that could not be loaded is never
written (its save fails, loudly, at the round it happens, and the previous one stays).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from dataclasses import fields
from pathlib import Path
from typing import TypeGuard

import torch

from .._files import open_regular
from . import payload as pl
from .types import RoundRecord

_META_KEY = "fedkernels.checkpoint"
_SUM_KEY = "fedkernels.checksum"
HISTORY = "fedkernels.history"  # the body tensor holding the history (uint8 JSON)
FORMAT = 3
MAX_ROUND = 2**31 - 1  # a round counter beyond this is implausible and refused
MAX_HEADER_BYTES = 1 << 16
"""The most header bytes a checkpoint may have (its tensor entries and the small JSON metadata)."""
MAX_RECORD_BYTES = 1 << 16
"""The most bytes one round's record may take in the history (compact JSON). A record is bounded by
construction: a round's clients, their failure reasons (each at most ``MAX_REASON_CHARS``,
:func:`fedkernels.fl.round.failure_reason`) and the server's own metrics."""
MAX_HISTORY_BYTES = 1 << 34
"""The largest history the loader reads (16 GiB, far above ``MAX_RECORD_BYTES`` times any real run's
rounds; the bound that matters is ``round x MAX_RECORD_BYTES``, checked from the header first)."""
RECORD_FIELDS = tuple(f.name for f in fields(RoundRecord))


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
    """Remove temp files that an interrupted save of ``path`` left (``.<name>.tmp-<pid>``). Returns what
    was removed.

    A writer holds an exclusive ``flock`` on its temp file from creation to rename, so a temp file
    whose lock can be taken has no live writer anywhere on this machine, whatever PID namespace
    (container) it runs in; a PID alone cannot tell, since another namespace's live writer may have a
    PID that is free here. A file is removed only when its lock is free and its PID is ours or gone.
    """
    path = Path(path)
    removed: list[Path] = []
    prefix = f".{path.name}.tmp-"
    if not path.parent.is_dir():
        return removed
    for tmp in path.parent.iterdir():
        pid = tmp.name[len(prefix) :]
        if not tmp.name.startswith(prefix) or not pid.isascii() or not pid.isdigit():
            continue
        if int(pid) != os.getpid() and _pid_alive(int(pid)):
            continue
        try:
            fd = os.open(tmp, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone already, a link, or not ours to open
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live writer holds it (maybe from another PID namespace)
        try:
            if os.stat(tmp, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                tmp.unlink()
                removed.append(tmp)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _open_locked_temp(tmp: Path) -> int:
    """Create (or truncate) ``tmp`` and take its ``flock``; retried if a cleaner removed the file
    between the open and the lock (the lock would then guard an unlinked file)."""
    for _ in range(8):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
    raise OSError(f"cannot create the temp file {tmp}: it keeps being removed")


def _record_json(rec: dict) -> bytes:
    return json.dumps(rec, allow_nan=True, separators=(",", ":")).encode()


class HistoryLog:
    """A run's history as checkpoint JSON, each record encoded and checked once.

    A record is final once a later one exists (the loop may still add metrics to the last record, e.g.
    after a federated evaluation), so :meth:`encode` keeps the JSON of every record but the last and
    encodes only the new ones and the last: a save then costs the concatenation of the kept bytes, not
    a re-encoding and re-check of every round so far. A writer that changes an earlier record must use
    a fresh log (the in-process :class:`~fedkernels.fl.Server` never does)."""

    def __init__(self, num_clients: object = None, path: str | Path = "") -> None:
        self.num_clients, self.path = num_clients, path
        self._final: list[bytes] = []

    def encode(self, records: list[dict]) -> bytes:
        """The history tensor's bytes for ``records`` (dicts as :func:`record_from_json` reads them).

        Raises:
            PayloadError: a record fails :func:`check_record` (naming its field).
        """
        if len(self._final) >= len(records):
            self._final = self._final[: max(0, len(records) - 1)]
        for i in range(len(self._final), len(records)):
            line = _record_json(records[i])
            check_record(json.loads(line), i, self.num_clients, self.path)  # as the reader will see it
            if i < len(records) - 1:
                self._final.append(line)
            else:
                last = line
        parts = self._final + ([last] if records else [])
        return b"[" + b",".join(parts) + b"]"


def encode_checkpoint(state: dict[str, torch.Tensor], meta: dict, history: bytes | None = None) -> bytes:
    """The bytes of a checkpoint of ``state`` with ``meta`` (a JSON-able dict with ``round`` and
    ``history``, a list of round records as dicts, plus the run identity), or with ``history`` already
    encoded (:class:`HistoryLog`). The history goes into the ``fedkernels.history`` tensor, the rest
    into the header's metadata, both under the checksum."""
    if HISTORY in state:
        raise ValueError(f"state may not hold a tensor named {HISTORY!r} (the checkpoint's history)")
    small = {k: v for k, v in meta.items() if k != "history"}
    meta_json = json.dumps({"format": FORMAT, **small}, allow_nan=True)
    if history is None:
        history = json.dumps(meta.get("history", []), allow_nan=True, separators=(",", ":")).encode()
    tensors = {**state, HISTORY: torch.frombuffer(bytearray(history), dtype=torch.uint8)}
    return pl.encode(tensors, metadata={_META_KEY: meta_json, _SUM_KEY: checksum(tensors, meta_json)})


def save_checkpoint(
    path: str | Path, state: dict[str, torch.Tensor], meta: dict, log: HistoryLog | None = None
) -> None:
    """Write ``state`` and the JSON-able ``meta`` (with their checksum) to ``path`` atomically (temp
    file under ``flock``, fsync, rename, fsync of the directory). Stale temp files of earlier killed
    saves go first. With ``log``, ``meta["history"]`` is encoded (and its records checked) through it,
    so only the records new since the last save are.

    Raises:
        ValueError: the checkpoint would fail the loader's checks (a record or the header over its
            bound, malformed metadata); nothing is written and the previous checkpoint stays.
    """
    path = Path(path)
    clean_stale_temps(path)
    if log is None:
        body = encode_checkpoint(state, meta)
        check_file_bytes(body, state, path, tensors=False)  # loadable, or not written at all
    else:
        body = encode_checkpoint(state, meta, log.encode(meta["history"]))
        check_file_bytes(body, state, path, tensors=False, records=len(meta["history"]))
    tmp = _temp_name(path, os.getpid())
    fd = _open_locked_temp(tmp)
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the previous checkpoint, if any, is still whole
        raise
    finally:
        os.close(fd)  # releases the lock, after the rename
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_spec(like: dict[str, torch.Tensor]) -> pl.PayloadSpec:
    """What a checkpoint of a state shaped like ``like`` looks like: its tensors exactly, plus the history."""
    specs = {k: pl.TensorSpec(v.dtype, tuple(v.shape), finite=False) for k, v in like.items()}
    specs[HISTORY] = pl.TensorSpec(torch.uint8, (None,), max_numel=MAX_HISTORY_BYTES)
    return pl.PayloadSpec(specs, max_bytes=pl.DEFAULT_MAX_BYTES << 4, max_header_bytes=MAX_HEADER_BYTES)


def load_checkpoint(path: str | Path, like: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict]:
    """Read a checkpoint whose tensors must have exactly the names, dtypes and shapes of ``like``.

    Returns the state and the metadata (``history`` included, as a list of record dicts).

    Raises:
        FileNotFoundError: nothing at ``path``.
        PayloadError: (a ``ValueError``) naming ``path``: not a regular file (a FIFO, device or
            directory is refused before it is opened), not a checkpoint, does not fit ``like``,
            fails its checksum, or has malformed metadata or history (the message names the field).
    """
    state_bytes = sum(t.numel() * t.element_size() for t in like.values())
    try:
        with open_regular(path, "checkpoint") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8 + MAX_HEADER_BYTES)
            # the history may take MAX_RECORD_BYTES a round: bound the file by the round its header claims
            rnd = _peek_round(head)
            limit = 8 + MAX_HEADER_BYTES + state_bytes + (rnd + 1) * MAX_RECORD_BYTES
            if size > limit:
                raise pl.PayloadError(
                    f"checkpoint {path}: {size} bytes, more than the {limit} of a checkpoint of this state "
                    f"after {rnd} rounds"
                )
            data = head + f.read(limit + 1 - len(head))
    except pl.PayloadError:
        raise
    except ValueError as e:  # not a regular file
        raise pl.PayloadError(str(e)) from None
    if len(data) > limit:
        raise pl.PayloadError(f"checkpoint {path} grew past {limit} bytes while it was read")
    return check_file_bytes(data, like, path)


def _peek_round(head: bytes) -> int:
    """The round counter a checkpoint's header claims (0 if it cannot be read: the full checks then
    say what is wrong). Reads only ``head``, the file's first bytes."""
    try:
        n = int.from_bytes(head[:8], "little")
        if len(head) < 8 or n > MAX_HEADER_BYTES or 8 + n > len(head):
            return 0
        md = json.loads(head[8 : 8 + n]).get("__metadata__", {})
        rnd = json.loads(md[_META_KEY])["round"]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return 0
    return rnd if _is_int(rnd) and 0 <= rnd <= MAX_ROUND else 0


def check_file_bytes(
    data: bytes, like: dict[str, torch.Tensor], path: str | Path, tensors: bool = True, records: int | None = None
) -> tuple[dict[str, torch.Tensor], dict]:
    """Every check :func:`load_checkpoint` runs on a checkpoint's bytes: framing and sizes against
    ``like`` (header within ``MAX_HEADER_BYTES``), metadata and history fields, and (``tensors``) the
    tensors built and the checksum verified. With ``tensors=False`` (the writer's check of what it
    just encoded) no tensor is built and the returned state is empty; with ``records`` (the writer's
    count of records a :class:`HistoryLog` already checked one by one) the history is not parsed again.

    Raises:
        PayloadError: naming ``path`` and what is wrong.
    """
    spec = load_spec(like)
    try:
        if len(data) > spec.byte_limit():
            raise pl.PayloadError(f"{len(data)} bytes, more than the {spec.byte_limit()} of a checkpoint of this state")
        entries = pl.check_header(data, spec.header_limit())
        pl.check_claims(entries, spec)
    except pl.PayloadError as e:
        raise pl.PayloadError(f"checkpoint {path}: {e}") from None
    raw = _read_metadata(data)
    meta_json, stored_sum = raw.get(_META_KEY), raw.get(_SUM_KEY)
    if not isinstance(meta_json, str):
        raise pl.PayloadError(f"{path} is not a fedkernels checkpoint (no {_META_KEY} metadata)")
    meta = _parse_meta(meta_json, path)
    if meta.get("format") != FORMAT:
        raise pl.PayloadError(
            f"{path} has checkpoint format {meta.get('format')!r}, expected {FORMAT} (an older release's "
            "checkpoint: re-run it)"
        )
    rnd = meta.get("round")
    if not _is_int(rnd) or not 0 <= rnd <= MAX_ROUND:
        raise pl.PayloadError(f"checkpoint {path}: field 'round' must be an integer in [0, {MAX_ROUND}], got {rnd!r}")
    if "history" in meta:
        raise pl.PayloadError(f"checkpoint {path}: field 'history' belongs in the {HISTORY} tensor, not the header")
    n_hist = math.prod(entries[HISTORY]["shape"])
    if n_hist > (rnd + 1) * MAX_RECORD_BYTES:
        raise pl.PayloadError(
            f"checkpoint {path}: history of {n_hist} bytes for {rnd} rounds (at most {MAX_RECORD_BYTES} a round)"
        )
    state: dict[str, torch.Tensor] = {}
    if tensors:
        try:
            state = pl.decode(data, spec)
        except pl.PayloadError as e:
            raise pl.PayloadError(f"checkpoint {path}: {e}") from None
        if stored_sum != checksum(state, meta_json):
            raise pl.PayloadError(f"checkpoint {path} fails its checksum ({_SUM_KEY}): the file is damaged")
        history_raw = state.pop(HISTORY).numpy().tobytes()
    else:
        if records is not None:  # checked record by record as the log encoded them
            if records != rnd:
                raise pl.PayloadError(f"checkpoint {path}: field 'history' must hold {rnd} records, got {records}")
            for key in ("seed", "num_clients", "clients_per_round"):
                if key in meta and (not _is_int(meta[key]) or meta[key] < 0):
                    raise pl.PayloadError(f"checkpoint {path}: field '{key}' must be an integer >= 0")
            return state, meta
        n = int.from_bytes(data[:8], "little")
        begin, end = entries[HISTORY]["data_offsets"]
        history_raw = data[8 + n + begin : 8 + n + end]
    try:
        history = json.loads(history_raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise pl.PayloadError(f"checkpoint {path}: field 'history' is not valid JSON ({e})") from None
    meta["history"] = history
    check_meta(meta, path)
    return state, meta


def _parse_meta(meta_json: str, path: str | Path) -> dict:
    try:
        meta = json.loads(meta_json)
    except (ValueError, RecursionError) as e:
        raise pl.PayloadError(f"checkpoint {path}: metadata field {_META_KEY!r} is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise pl.PayloadError(f"checkpoint {path}: metadata field {_META_KEY!r} must be a JSON object")
    return meta


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_meta(meta: dict, path: str | Path) -> None:
    """Field checks of a checkpoint's metadata, types included (so a re-sealed file with a wrong type
    is refused here, never a ``TypeError`` later): ``round`` an int in ``[0, MAX_ROUND]``; ``history``
    a list of ``round`` records numbered 0, 1, ..., each with exactly the ``RoundRecord`` fields:
    ``clients`` distinct ints in ``[0, num_clients)``, ``failed`` ``[client, reason]`` pairs of those
    clients, byte counts ints >= 0, ``metrics`` names to numbers, ``seconds`` a finite number >= 0,
    ``skipped`` a string; and the run identity's ``seed``, ``num_clients`` and ``clients_per_round`` ints.

    Raises:
        PayloadError: naming ``path`` and the field.
    """

    def bad(field: str, what: str) -> pl.PayloadError:
        return pl.PayloadError(f"checkpoint {path}: field '{field}' {what}")

    rnd = meta.get("round")
    if not _is_int(rnd) or not 0 <= rnd <= MAX_ROUND:
        raise bad("round", f"must be an integer in [0, {MAX_ROUND}], got {rnd!r}")
    for key in ("seed", "num_clients", "clients_per_round"):
        if key in meta and (not _is_int(meta[key]) or meta[key] < 0):
            raise bad(key, f"must be an integer >= 0, got {meta[key]!r}")
    num_clients = meta.get("num_clients")
    hist = meta.get("history")
    if not isinstance(hist, list) or len(hist) != rnd:
        got = f"{len(hist)} records" if isinstance(hist, list) else repr(type(hist).__name__)
        raise bad("history", f"must be a list of {rnd} records (one per round), got {got}")
    for i, rec in enumerate(hist):
        check_record(rec, i, num_clients, path)


def check_record(rec: object, i: int, num_clients: object, path: str | Path) -> None:
    """Field checks of history record ``i`` (see :func:`check_meta`).

    Raises:
        PayloadError: naming ``path`` and the field.
    """

    def bad(field: str, what: str) -> pl.PayloadError:
        return pl.PayloadError(f"checkpoint {path}: field '{field}' {what}")

    where = f"history[{i}]"
    # ``faults`` and ``contributed`` are absent from records written before they existed (record_from_json
    # fills them in)
    optional = {"faults", "contributed"}
    if not isinstance(rec, dict) or set(rec) - optional != set(RECORD_FIELDS) - optional:
        raise bad(where, f"must be a record with exactly the fields {', '.join(RECORD_FIELDS)}")
    if rec["round"] != i or not _is_int(rec["round"]):
        raise bad(f"{where}.round", f"must be {i}, got {rec['round']!r}")
    clients = rec["clients"]
    if not isinstance(clients, list) or not all(_is_int(c) and c >= 0 for c in clients):
        raise bad(f"{where}.clients", f"must be a list of client ids, got {clients!r:.80}")
    if len(set(clients)) != len(clients) or (_is_int(num_clients) and any(c >= num_clients for c in clients)):
        raise bad(f"{where}.clients", f"must be distinct ids below num_clients = {num_clients}")
    failed = rec["failed"]
    ok = isinstance(failed, list) and all(
        isinstance(f, list) and len(f) == 2 and _is_int(f[0]) and f[0] in clients and isinstance(f[1], str)
        for f in failed
    )
    if not ok:
        raise bad(f"{where}.failed", f"must be a list of [client, reason] of its clients, got {failed!r:.80}")
    given = rec.get("contributed", clients)
    if not isinstance(given, list) or not all(_is_int(c) and c in clients for c in given):
        raise bad(f"{where}.contributed", f"must be a list of its clients, got {given!r:.80}")
    for key in ("bytes_down", "bytes_up"):
        if not _is_int(rec[key]) or not 0 <= rec[key] < 2**63:
            raise bad(f"{where}.{key}", f"must be an integer >= 0, got {rec[key]!r}")
    metrics = rec["metrics"]
    if not isinstance(metrics, dict) or not all(isinstance(k, str) and _is_number(v) for k, v in metrics.items()):
        raise bad(f"{where}.metrics", f"must map names to numbers, got {metrics!r:.80}")
    sec = rec["seconds"]
    if not _is_number(sec) or not math.isfinite(sec) or sec < 0:
        raise bad(f"{where}.seconds", f"must be a finite number >= 0, got {sec!r}")
    if not isinstance(rec["skipped"], str):
        raise bad(f"{where}.skipped", f"must be a string, got {rec['skipped']!r:.80}")
    privacy = rec["privacy"]
    if not isinstance(privacy, dict) or not all(isinstance(k, str) and _is_number(v) for k, v in privacy.items()):
        raise bad(f"{where}.privacy", f"must map names to numbers, got {privacy!r:.80}")
    faults = rec.get("faults", [])
    if not isinstance(faults, list) or not all(
        isinstance(f, list) and len(f) == 2 and _is_int(f[0]) and f[0] in clients and isinstance(f[1], str)
        for f in faults
    ):
        raise bad(f"{where}.faults", f"must be a list of [client, reason] of its clients, got {faults!r:.80}")


def _read_metadata(data: bytes) -> dict[str, object]:
    """The ``__metadata__`` of a safetensors header (already validated by :func:`payload.check_header`)."""
    n = int.from_bytes(data[:8], "little")
    md = json.loads(data[8 : 8 + n]).get("__metadata__", {})
    return md if isinstance(md, dict) else {}
