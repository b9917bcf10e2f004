"""Download registered datasets into a local cache, verified, with a progress bar.

The cache is ``$FEDKERNELS_DATA_DIR`` if set, else ``$XDG_CACHE_HOME/fedkernels/data`` (default
``~/.cache/fedkernels/data``); each dataset gets ``<cache>/<name>/`` holding ``train.<ext>`` and
``test.<ext>`` and a ``fedkernels-complete.json`` written last (so a folder without it is an
interrupted download and is fetched again). Every failure is a :class:`DownloadError` that says
what happened: connection refused, DNS failure, timeout, an HTTP error status, a truncated body, an
HTML page where a file was expected, a checksum mismatch, or a bad archive.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import socket
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path
from typing import IO

from tqdm import tqdm

from .remote import RemoteDataset, RemoteFile, get_remote
from .xc_layouts import find_layout, place_layout

ENV_VAR = "FEDKERNELS_DATA_DIR"
MARKER = "fedkernels-complete.json"
_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A dataset could not be fetched; the message says why and from where."""


def cache_dir() -> Path:
    """The root of the dataset cache (``$FEDKERNELS_DATA_DIR`` or ``~/.cache/fedkernels/data``)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "fedkernels" / "data"


def dataset_dir(name: str) -> Path:
    """Where dataset ``name`` lives in the cache (whether or not it has been fetched)."""
    return cache_dir() / get_remote(name).name


def is_fetched(name: str) -> bool:
    """Whether ``name`` has been fetched completely."""
    return (dataset_dir(name) / MARKER).is_file()


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
) -> str:
    """Download ``url`` to ``dest`` (through ``dest.part``, renamed only once complete and verified).

    Args:
        url: ``http(s)://`` or ``file://``.
        dest: the final path.
        sha256: the expected SHA-256; ``None`` prints the computed one to ``log`` instead.
        progress: show a tqdm bar on stderr.
        timeout: seconds without progress before giving up.
        log: where to print (default stdout).

    Returns:
        The file's SHA-256.

    Raises:
        DownloadError: any failure (the partial file is removed).
    """
    log = log or sys.stdout
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        digest = _stream(url, part, progress, timeout)
        if sha256 is not None and digest != sha256.lower():
            raise DownloadError(
                f"checksum mismatch for {url}: expected SHA-256 {sha256.lower()}, got {digest} "
                "(a corrupted or changed file; nothing was kept)"
            )
        if sha256 is None:
            print(f"{dest.name}: SHA-256 {digest} (no checksum recorded for it, so it was not verified)", file=log)
        os.replace(part, dest)
        return digest
    finally:
        part.unlink(missing_ok=True)


def _stream(url: str, part: Path, progress: bool, timeout: float) -> str:
    h = hashlib.sha256()
    got = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            total = resp.headers.get("Content-Length")
            total = int(total) if total is not None and total.isdigit() else None
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
                    out.write(block)
                    h.update(block)
                    got += len(block)
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


def fetch(
    name: str, url: str | None = None, force: bool = False, progress: bool = True, log: IO[str] | None = None
) -> Path:
    """Fetch a registered dataset into the cache and return its folder (``train.*`` and ``test.*``).

    Args:
        name: a registry name (``fedkernels data list``).
        url: use this URL instead of the recorded one (a mirror, or ``file://`` for a manual
            download); only for datasets published as a single file. Its checksum is still checked
            when one is recorded.
        force: fetch again even if the cache has it.
        progress: tqdm progress bars on stderr.
        log: where messages go (default stdout).

    Raises:
        DownloadError: a network, checksum or archive failure; ValueError: an unknown name, or a
            dataset with no recorded URL and no ``url`` given.
    """
    ds = get_remote(name)
    folder = cache_dir() / ds.name
    if (folder / MARKER).is_file() and not force:
        return folder
    files = list(ds.files)
    if url is not None:
        if len(files) != 1:
            raise ValueError(f"--url works for datasets published as one file; {ds.name} has {len(files)}")
        files = [RemoteFile(url, files[0].name, files[0].sha256, files[0].extract)]
    missing = [f.name for f in files if f.url is None]
    if missing:
        raise ValueError(f"{ds.name}: {ds.notes or 'no download URL recorded'} (page: {ds.page})")
    if ds.train == ds.test and not (ds.train_split and ds.test_split):
        raise ValueError(f"{ds.name}: train and test are one file but no split files are recorded")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    digests = {}
    try:
        for f in files:
            path = folder / f.name
            assert f.url is not None  # every file without one was refused above
            digests[f.name] = download(f.url, path, f.sha256, progress, log=log)
            if f.extract == "zip":
                _unzip(path, folder)
        _place(ds, folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # nothing half-fetched stays in the cache
        raise
    (folder / MARKER).write_text(
        json.dumps({"name": ds.name, "sha256": digests, "urls": [f.url for f in files]}, indent=1)
    )
    return folder


def _unzip(path: Path, folder: Path) -> None:
    try:
        with zipfile.ZipFile(path) as z:
            root = folder.resolve()
            for member in z.namelist():  # no member may land outside the folder
                if not (folder / member).resolve().is_relative_to(root):
                    raise DownloadError(f"{path.name}: archive member {member!r} points outside the cache folder")
            z.extractall(folder)
    except zipfile.BadZipFile as e:
        raise DownloadError(f"{path.name} is not a valid zip archive ({e})") from None
    path.unlink()


def _place(ds: RemoteDataset, folder: Path) -> None:
    """Move the train/test files to ``train.<ext>``/``test.<ext>`` (npz: ``train_X.npz`` stays paired),
    or cut them from one data file by the first split of its split files."""
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
