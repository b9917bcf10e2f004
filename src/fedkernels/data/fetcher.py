"""Download registered datasets into the data folder, bounded, verified and swapped in whole.

The data folder is :func:`fedkernels.data.locations.data_dir` (``$FEDKERNELS_DATA_DIR``, default
``~/.cache/fedkernels/data``); each dataset gets ``<folder>/<name>/`` holding ``train.<ext>`` and
``test.<ext>`` and a ``fedkernels-complete.json`` written last, which records the SHA-256 of every
file it placed (``fedkernels data verify`` and every load check them, so later edits are noticed).

A ``get``:

- holds a lock per dataset (``<folder>/.<name>.lock``, ``flock``), so two concurrent gets of one
  dataset never delete each other's work: the second waits, then finds the first one's copy;
- downloads into a staging folder and replaces the cached copy only once the new one is complete
  and verified (``--force`` never leaves you with nothing);
- bounds every download by the dataset's size bound (:meth:`RemoteDataset.size_bound`, checked
  against ``Content-Length`` first, then while streaming: an endless body stops there) and every
  archive by :data:`MAX_ARCHIVE_RATIO` and the same bound (on the members' claimed sizes before
  anything is unpacked, and on the bytes written);
- checks each file against its SHA-256 when the registry records one; when it does not, the first
  download's SHA-256 is recorded in ``<folder>/.fedkernels-trust.json`` (trust on first use, with a
  warning), and every later download of that file must match it.

Every failure is a :class:`DownloadError` that says what happened: connection refused, DNS failure,
timeout, an HTTP error status, a truncated or oversized body, an HTML page where a file was
expected, a checksum mismatch, a bad or oversized archive, or a disk error.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import hashlib
import http.client
import io
import json
import os
import secrets
import shutil
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tqdm import tqdm

from .locations import DEPRECATED_ENV_VAR, ENV_VAR, MARKER, data_dir, find_dataset
from .remote import RemoteDataset, RemoteFile, get_remote
from .xc_layouts import find_layout, place_layout

__all__ = [
    "DEPRECATED_ENV_VAR",
    "ENV_VAR",
    "MARKER",
    "MAX_ARCHIVE_RATIO",
    "DownloadError",
    "cache_dir",
    "dataset_dir",
    "download",
    "fetch",
    "is_fetched",
    "sha256_of",
    "verify",
    "verify_folder",
]

TRUST = ".fedkernels-trust.json"
MAX_ARCHIVE_RATIO = 100
"""The most an archive's members may claim to unpack to, as a multiple of the archive's size (text
datasets compress 3 to 10 times; deflate can reach 1032, which only a crafted archive needs)."""
_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A dataset could not be fetched; the message says why and from where."""


class _DiskError(DownloadError):
    """The download arrived but could not be written (no offline advice helps)."""


def cache_dir() -> Path:
    """The data folder that ``get`` downloads into (:func:`fedkernels.data.locations.data_dir`)."""
    return data_dir()


def dataset_dir(name: str, root: str | Path | None = None) -> Path:
    """Where dataset ``name`` lives in the data folder (whether or not it has been fetched)."""
    return (Path(root) if root else data_dir()) / get_remote(name).name


def is_fetched(name: str, root: str | Path | None = None) -> bool:
    """Whether ``name`` has been fetched completely."""
    return (dataset_dir(name, root) / MARKER).is_file()


def sha256_of(path: str | Path) -> str:
    """The SHA-256 (hex) of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def download(
    url: str,
    dest: Path,
    sha256: str | None = None,
    progress: bool = True,
    timeout: float = 60.0,
    log: IO[str] | None = None,
    max_bytes: int | None = None,
) -> str:
    """Download ``url`` to ``dest`` (through ``dest.part``, renamed only once complete and verified).

    Args:
        url: ``http(s)://`` or ``file://``.
        dest: the final path.
        sha256: the expected SHA-256; ``None`` prints the computed one to ``log`` instead.
        progress: show a tqdm bar on stderr.
        timeout: seconds without progress before giving up.
        log: where to print (default stdout).
        max_bytes: refuse a body longer than this (announced or streamed).

    Returns:
        The file's SHA-256.

    Raises:
        DownloadError: any failure (the partial file is removed).
    """
    log = log or sys.stdout
    part = dest.with_name(dest.name + ".part")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        digest = _stream(url, part, progress, timeout, max_bytes)
        if sha256 is not None and digest != sha256.lower():
            raise DownloadError(
                f"checksum mismatch for {url}: expected SHA-256 {sha256.lower()}, got {digest} "
                "(a corrupted or changed file; nothing was kept)"
            )
        if sha256 is None:
            print(f"{dest.name}: SHA-256 {digest} (no checksum recorded for it, so it was not verified)", file=log)
        os.replace(part, dest)
        return digest
    except OSError as e:  # the disk: full, read-only, permissions
        raise _DiskError(f"cannot write {e.filename or dest}: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(OSError):
            part.unlink(missing_ok=True)


def _stream(url: str, part: Path, progress: bool, timeout: float, max_bytes: int | None) -> str:
    h = hashlib.sha256()
    got = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            total = resp.headers.get("Content-Length")
            total = int(total) if total is not None and total.isascii() and total.isdigit() else None
            if max_bytes is not None and total is not None and total > max_bytes:
                raise DownloadError(
                    f"{url} announces {total} bytes, more than the {max_bytes} this dataset may take "
                    "(a wrong or hostile file; nothing was downloaded)"
                )
            ctype = resp.headers.get("Content-Type") or ""
            if ctype.startswith("text/html") and not url.lower().endswith((".html", ".htm")):
                raise DownloadError(
                    f"{url} returned an HTML page, not the file (a login, quota or "
                    "'confirm download' page?); download it in a browser and pass "
                    "--url file:///path/to/the/file"
                )
            with (
                open(part, "wb") as out,
                tqdm(
                    total=total,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=part.name[: -len(".part")],
                    disable=not progress,
                    file=sys.stderr,
                ) as bar,
            ):
                while True:
                    block = resp.read(_CHUNK)
                    if not block:
                        break
                    got += len(block)
                    if max_bytes is not None and got > max_bytes:
                        raise DownloadError(
                            f"{url} sent more than the {max_bytes} bytes this dataset may take (stopped there; "
                            "nothing was kept)"
                        )
                    out.write(block)
                    h.update(block)
                    bar.update(len(block))
    except DownloadError:
        raise
    except urllib.error.HTTPError as e:
        raise DownloadError(f"HTTP {e.code} {e.reason} for {url}") from None
    except urllib.error.URLError as e:
        raise DownloadError(f"cannot download {url}: {_reason(e.reason)}") from None
    except http.client.IncompleteRead as e:
        raise DownloadError(
            f"truncated download from {url}: the connection closed after {got + len(e.partial)} bytes"
        ) from None
    except TimeoutError:
        raise DownloadError(f"timed out downloading {url} (no data for {timeout:g} s, {got} bytes received)") from None
    except (ConnectionError, http.client.HTTPException) as e:
        raise DownloadError(f"connection to {url} failed after {got} bytes: {_reason(e)}") from None
    if total is not None and got != total:
        raise DownloadError(f"truncated download from {url}: got {got} of {total} bytes")
    return h.hexdigest()


def _reason(reason: object) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the server up and the address right?)"
    if isinstance(reason, socket.gaierror):
        return f"host name lookup failed ({reason}); are you offline?"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(reason, FileNotFoundError):
        return f"no such file ({reason.filename})"
    return str(reason)


@contextlib.contextmanager
def _dataset_lock(root: Path, name: str, log: IO[str]) -> Iterator[None]:
    """Hold ``<root>/.<name>.lock`` (``flock``, released when the process dies) for a whole get, and
    delete it when done, whatever happened. The holder deletes it while it still holds the lock, so a
    get that was waiting on it finds, once it has the lock, that the path names no file or another one,
    and locks afresh: two gets never hold the lock at once."""
    lock = root / f".{name}.lock"
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                print(f"{name}: waiting for another `fedkernels data get {name}` to finish (lock {lock})", file=log)
                fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(lock)
            except FileNotFoundError:
                current = None
            mine = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
            break
        os.close(fd)  # the previous holder deleted this lock file: lock the current one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def _trust_file(root: Path) -> Path:
    return root / TRUST


def _read_trust(root: Path) -> dict:
    try:
        data = json.loads(_trust_file(root).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def fetch(
    name: str,
    url: str | None = None,
    force: bool = False,
    progress: bool = True,
    log: IO[str] | None = None,
    root: str | Path | None = None,
) -> Path:
    """Fetch a registered dataset into the data folder and return its folder (``train.*``, ``test.*``).

    Args:
        name: a registry name (``fedkernels data list``).
        url: use this URL instead of the recorded one (a mirror, or ``file://`` for a manual
            download); only for datasets published as a single file. Its checksum is still checked
            when one is recorded (or was trusted on first use).
        force: fetch again even if the folder has it; the old copy is replaced only once the new one
            is complete and verified.
        progress: tqdm progress bars on stderr.
        log: where messages go (default stdout; warnings go to stderr).
        root: the data folder (default :func:`fedkernels.data.locations.data_dir`).

    Raises:
        DownloadError: a network, size, checksum, archive or disk failure; ValueError: an unknown
            name, or a dataset with no recorded URL and no ``url`` given.
    """
    log = log or sys.stdout
    ds = get_remote(name)
    root = Path(root) if root else data_dir()
    folder = root / ds.name
    if (folder / MARKER).is_file() and not force:
        return folder
    files = list(ds.files)
    if url is not None:
        files = _files_from(ds, url)
    if any(f.url is None for f in files):
        raise ValueError(f"{ds.name}: {ds.notes or 'no download URL recorded'} (page: {ds.page})")
    if ds.train == ds.test and not (ds.train_split and ds.test_split):
        raise ValueError(f"{ds.name}: train and test are one file but no split files are recorded")
    created = not root.exists()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DownloadError(f"cannot create the data folder {root}: {e.strerror or e}") from None
    try:
        with _dataset_lock(root, ds.name, log):
            if (folder / MARKER).is_file() and not force:
                return folder  # another get finished it while this one waited
            _remove_leftovers(root, ds.name)
            staging = root / f".{ds.name}.staging-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                staging.mkdir()
                marker = _fill(ds, files, staging, root, progress, log)
                (staging / MARKER).write_text(json.dumps(marker, indent=1))
                _swap_in(staging, folder)
            except OSError as e:
                raise DownloadError(f"cannot write {e.filename or staging}: {e.strerror or e}") from None
            finally:
                shutil.rmtree(staging, ignore_errors=True)  # nothing half-fetched stays
    except BaseException:
        if created:  # a data folder this get made and filled with nothing goes too
            with contextlib.suppress(OSError):
                root.rmdir()
        raise
    return folder


def _files_from(ds: RemoteDataset, url: str) -> list[RemoteFile]:
    """``ds``'s files fetched from ``url`` (``--url``): a folder URL (ending in ``/``, or a ``file://``
    folder) holding every file under its registered name, or, for a dataset of one file, that file."""
    is_folder = url.endswith("/")
    if not is_folder and url.startswith("file:"):
        is_folder = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path)).is_dir()
    if is_folder:
        base = url if url.endswith("/") else url + "/"
        return [RemoteFile(base + urllib.parse.quote(f.name), f.name, f.sha256, f.extract) for f in ds.files]
    if len(ds.files) != 1:
        raise ValueError(
            f"{ds.name} is published as {len(ds.files)} files ({', '.join(f.name for f in ds.files)}): pass --url "
            "a folder that holds them all under those names (file:///path/to/folder/), not one file"
        )
    f0 = ds.files[0]
    return [RemoteFile(url, f0.name, f0.sha256, f0.extract)]


def offline_help(ds: RemoteDataset, root: Path) -> str:
    """What to do when ``ds`` cannot be downloaded from here (offline, a firewall, a host that is down):
    fetch its files elsewhere and pass them with ``--url file://...``, or place a copy by hand; first,
    where a run already finds one (:func:`~fedkernels.data.locations.find_dataset`), if it does."""
    names = [f.name for f in ds.files]
    urls = [f.url for f in ds.files if f.url]
    where = " and ".join(urls) if urls else f"the files from {ds.page}"
    if len(names) == 1:
        get = f"`fedkernels data get {ds.name} --url file:///path/to/{names[0]}`"
    else:
        get = (
            f"put {' and '.join(names)} in one folder and run "
            f"`fedkernels data get {ds.name} --url file:///path/to/that/folder/`"
        )
    found = find_dataset(ds.name, root)
    have = (
        f"A copy is already at {found.path}, which `fedkernels run --dataset {ds.name}` reads as it is. "
        if found is not None
        else ""
    )
    return have + (
        f"To get it without this network: download {where} where you can, then {get} (checksums are still "
        f"checked); or place a copy already holding train.txt and test.txt (XC text) at {root / ds.name}, or "
        f"set ${ENV_VAR} (or --data-dir) to a folder that holds one named {ds.name} (any case), which "
        f"`fedkernels run --dataset {ds.name}` then reads as it is"
    )


def _remove_leftovers(root: Path, name: str) -> None:
    """Staging and old folders of earlier gets of ``name`` that died (we hold the lock: none is live)."""
    for p in root.glob(f".{name}.staging-*"):
        shutil.rmtree(p, ignore_errors=True)
    for p in root.glob(f".{name}.old-*"):
        shutil.rmtree(p, ignore_errors=True)


def _swap_in(staging: Path, folder: Path) -> None:
    """Replace ``folder`` by the complete ``staging`` folder: two renames, the old copy deleted last."""
    old = None
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        os.replace(folder, old)
    try:
        os.replace(staging, folder)
    except BaseException:
        if old is not None:
            os.replace(old, folder)  # put the previous copy back
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _fill(
    ds: RemoteDataset,
    files: list[RemoteFile],
    staging: Path,
    root: Path,
    progress: bool,
    log: IO[str],
) -> dict:
    """Download, verify, unpack and place every file of ``ds`` into ``staging``; the marker's content.
    A failed download's error ends with :func:`offline_help` (unless the disk or a local file failed)."""
    bound = ds.size_bound()
    trust = _read_trust(root)
    trusted = trust.get(ds.name, {}) if isinstance(trust.get(ds.name), dict) else {}
    digests, first_use = {}, []
    for f in files:
        assert f.url is not None  # every file without one was refused above
        path = staging / f.name
        entry = trusted.get(f.name)
        record: dict = entry if isinstance(entry, dict) else {}
        expected = f.sha256 or record.get("sha256")
        try:
            digest = download(f.url, path, expected, progress, log=io.StringIO(), max_bytes=bound)
        except DownloadError as e:
            if f.sha256 is None and expected is not None and "checksum mismatch" in str(e):
                raise DownloadError(
                    f"{e}; the SHA-256 expected was trusted on first use on {record.get('first_seen', '?')} "
                    f"(recorded in {_trust_file(root)}): if the publisher really changed {f.name}, delete the "
                    f"{ds.name!r} entry there to trust the new file"
                ) from None
            if isinstance(e, _DiskError) or f.url.startswith("file:"):
                raise  # the disk's fault, or a local file that is not there: the message names it
            end = " " if str(e).endswith(("?", ".")) else ". "
            raise DownloadError(f"{e}{end}{offline_help(ds, root)}") from None
        if f.sha256 is None and expected is None:
            first_use.append(f.name)
            print(
                f"warning: {ds.name}: no checksum is recorded for {f.name}; trusting this first download "
                f"(SHA-256 {digest}) and recording it in {_trust_file(root)}: later downloads must match it",
                file=sys.stderr,
            )
            print(f"{f.name}: SHA-256 {digest} (no checksum recorded for it: trusted on first use)", file=log)
        digests[f.name] = digest
        if f.extract == "zip":
            _unzip(path, staging, bound)
    _place(ds, staging)
    placed = {p.name: sha256_of(p) for p in sorted(staging.iterdir()) if p.is_file()}
    if first_use:
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        entry = dict(trusted)
        for n in first_use:
            entry[n] = {"sha256": digests[n], "url": next(f.url for f in files if f.name == n), "first_seen": now}
        trust[ds.name] = entry
        tmp = _trust_file(root).with_name(f"{TRUST}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(trust, indent=1))
        os.replace(tmp, _trust_file(root))
    return {
        "name": ds.name,
        "sha256": digests,
        "urls": [f.url for f in files],
        "files": placed,
        "trusted_on_first_use": first_use,
    }


def _unzip(path: Path, folder: Path, bound: int) -> None:
    """Unpack the zip ``path`` into ``folder``: every member inside the folder, the members' claimed
    sizes within :data:`MAX_ARCHIVE_RATIO` x the archive and ``bound`` in total before anything is
    written, and the bytes actually written counted against the same limit."""
    try:
        with zipfile.ZipFile(path) as z:
            root = folder.resolve()
            infos = z.infolist()
            for info in infos:  # no member may land outside the folder
                if not (folder / info.filename).resolve().is_relative_to(root):
                    raise DownloadError(f"{path.name}: archive member {info.filename!r} points outside the data folder")
            claimed = sum(i.file_size for i in infos)
            limit = min(bound, MAX_ARCHIVE_RATIO * max(path.stat().st_size, 1))
            if claimed > limit:
                raise DownloadError(
                    f"{path.name}: its members claim {claimed} bytes unpacked from {path.stat().st_size}, more than "
                    f"the {limit} allowed ({MAX_ARCHIVE_RATIO} x the archive, at most the dataset's bound {bound})"
                )
            written = 0
            for info in infos:
                target = folder / info.filename
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as out:
                    while block := src.read(_CHUNK):
                        written += len(block)
                        if written > limit:
                            raise DownloadError(f"{path.name}: unpacks to more than {limit} bytes")
                        out.write(block)
    except DownloadError:
        raise
    except zipfile.BadZipFile as e:
        raise DownloadError(f"{path.name} is not a valid zip archive ({e})") from None
    except (EOFError, zipfile.LargeZipFile, NotImplementedError, RuntimeError) as e:
        raise DownloadError(f"{path.name} could not be unpacked ({type(e).__name__}: {e})") from None
    path.unlink()


def _place(ds: RemoteDataset, folder: Path) -> None:
    """Move the train/test files to ``train.<ext>``/``test.<ext>`` (npz: ``train_X.npz`` stays paired),
    convert Mulan ARFF files to XC text, or cut them from one data file by the first split of its
    split files."""
    if ds.train_split and ds.test_split:
        _apply_split(ds, folder, ds.train_split, ds.test_split)
        return
    if ds.format == "xc-split" or (ds.format == "xc" and not (folder / ds.train).is_file()):
        # the LF-* split files, or an XC zip laid out otherwise than recorded (e.g. a "BoW features"
        # zip's <Name>.bow/train.txt): placed by what the download holds
        layout = find_layout(folder)
        if layout is None:
            raise DownloadError(
                f"{ds.name}: expected {ds.train} (or another layout of the XC repository) in the download"
            )
        place_layout(layout, folder)
        return
    for part, rel in (("train", ds.train), ("test", ds.test)):
        src = folder / rel
        if not src.is_file():
            raise DownloadError(f"{ds.name}: expected {rel} in the download, but it is not there")
        if ds.format == "npz":
            for kind in ("X", "Y"):
                s = src.with_name(src.name.replace("_X.npz", f"_{kind}.npz"))
                os.replace(s, folder / f"{part}_{kind}.npz")
        elif ds.format == "arff":
            from .arff import read_mulan_arff
            from .formats import write_xc

            if ds.num_labels is None:
                raise DownloadError(f"{ds.name}: an ARFF dataset needs num_labels recorded")
            try:
                data = read_mulan_arff(src, ds.num_labels)
            except ValueError as e:
                raise DownloadError(f"{ds.name}: {rel} is not a Mulan ARFF file ({e})") from None
            write_xc(data, folder / f"{part}.txt")
            src.unlink()
        else:
            os.replace(src, folder / f"{part}.{'txt' if ds.format == 'xc' else 'svm'}")


def _apply_split(ds: RemoteDataset, folder: Path, train_split: str, test_split: str) -> None:
    """Write ``train.txt``/``test.txt`` from the data file and the first column of each split file
    (``ds.train_split``, ``ds.test_split``, passed as set)."""
    import numpy as np

    from .formats import write_xc
    from .xc_format import read_xc

    for rel in (ds.train, train_split, test_split):
        if not (folder / rel).is_file():
            raise DownloadError(f"{ds.name}: expected {rel} in the download, but it is not there")
    data = read_xc(folder / ds.train)
    for part, rel in (("train", train_split), ("test", test_split)):
        try:
            rows = np.loadtxt(folder / rel, dtype=np.int64, ndmin=2)[:, 0] - 1
        except ValueError as e:
            raise DownloadError(f"{ds.name}: split file {rel} is not columns of row numbers ({e})") from None
        if rows.size and (rows.min() < 0 or rows.max() >= data.num_samples):
            raise DownloadError(f"{ds.name}: split file {rel} names rows outside 1..{data.num_samples}")
        write_xc(data.subset(rows), folder / f"{part}.txt")
    for rel in {ds.train, train_split, test_split}:  # only train.txt and test.txt stay
        (folder / rel).unlink(missing_ok=True)


def verify_folder(folder: Path) -> dict[str, str]:
    """Each file a fetched dataset's marker lists, checked against the SHA-256 recorded when it was
    fetched: ``{file: "ok" | "changed" | "missing"}``.

    Raises:
        ValueError: a file changed or is missing (the message names them and the fix).
    """
    status = folder_status(folder)
    bad = {k: v for k, v in status.items() if v != "ok"}
    if bad:
        what = ", ".join(f"{k} ({v})" for k, v in sorted(bad.items()))
        raise ValueError(
            f"{folder}: files changed since `fedkernels data get` fetched them: {what}; "
            f"run `fedkernels data get {folder.name} --force` to fetch them again"
        )
    return status


def folder_status(folder: Path) -> dict[str, str]:
    """``{file: "ok" | "changed" | "missing"}`` for every file ``folder``'s marker records
    (``{MARKER: "unreadable"}`` if the marker itself is not a record of files)."""
    try:
        marker = json.loads((folder / MARKER).read_text())
        files = marker["files"]
        if not isinstance(files, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        return {MARKER: "unreadable (fetched by an older release? `fedkernels data get NAME --force`)"}
    out = {}
    for name, want in files.items():
        p = folder / str(name)
        out[str(name)] = "missing" if not p.is_file() else ("ok" if sha256_of(p) == want else "changed")
    return out


def verify(name: str | None = None, root: str | Path | None = None) -> dict[str, dict[str, str]]:
    """The status of every fetched dataset's files (or of ``name``'s): ``{dataset: {file: status}}``.
    ``name`` is looked up as a run looks it up (:func:`~fedkernels.data.locations.find_dataset`, ``root``
    first): a copy placed by hand is reported as such, with its path (it has no checksums to check)."""
    base = Path(root) if root else data_dir()
    if name is not None:
        ds = get_remote(name)
        found = find_dataset(ds.name, root)
        if found is None:
            return {ds.name: {"": "not downloaded"}}
        if not found.fetched:
            return {ds.name: {"": f"placed by hand, no checksums recorded to check: {found.path}"}}
        folders = [found.path]
    else:
        folders = sorted(p.parent for p in base.glob(f"*/{MARKER}")) if base.is_dir() else []
    return {f.name: (folder_status(f) if (f / MARKER).is_file() else {"": "not downloaded"}) for f in folders}
