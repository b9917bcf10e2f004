"""Where datasets live: one data folder, and how a bare dataset name is found.

The data folder is ``$FEDKERNELS_DATA_DIR``, else ``$XDG_CACHE_HOME/fedkernels/data`` (default
``~/.cache/fedkernels/data``). ``fedkernels data get NAME`` downloads into it, and a bare name
(``bibtex``) given to ``--dataset``, a config file or a preset is looked up there and in the other
roots of :func:`data_roots`, in any case. ``FEDKERNELS_DATA`` (which once named only the folder of
datasets by name) is read as a deprecated alias when ``FEDKERNELS_DATA_DIR`` is unset.

:func:`find_dataset` is the one answer to "where is dataset NAME?": ``fedkernels run --dataset NAME``
reads what it finds and ``fedkernels data list`` / ``info`` report it (:func:`dataset_status`).
``FEDKERNELS_DATA_NO_FALLBACK=1`` leaves ``./data`` and ``../shared/data`` out of that search, so a
bare name is found only where it was put on purpose (the test suite sets it).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from .remote import find_remote

ENV_VAR = "FEDKERNELS_DATA_DIR"
DEPRECATED_ENV_VAR = "FEDKERNELS_DATA"
MARKER = "fedkernels-complete.json"
"""Written last into a dataset's folder by ``fedkernels data get``: the folder is complete, with the SHA-256
of every file it placed."""
NO_FALLBACK_ENV_VAR = "FEDKERNELS_DATA_NO_FALLBACK"


def data_dir() -> Path:
    """The data folder: ``$FEDKERNELS_DATA_DIR``, ``$FEDKERNELS_DATA`` (deprecated: a
    ``FutureWarning`` says to rename it) or ``~/.cache/fedkernels/data``."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    if os.environ.get(DEPRECATED_ENV_VAR):
        warnings.warn(
            f"${DEPRECATED_ENV_VAR} is deprecated: set ${ENV_VAR} instead (one folder for `fedkernels data get` "
            "downloads and datasets by name)",
            FutureWarning,
            stacklevel=2,
        )
        return Path(os.environ[DEPRECATED_ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "fedkernels" / "data"


def data_roots(data_dir_arg: str | Path | None = None) -> list[Path]:
    """Folders searched for a bare dataset name, in order: ``data_dir_arg`` (``--data-dir``), the data
    folder (:func:`data_dir`), ``./data`` and ``../shared/data`` (a checkout's sibling folder of data);
    the last two not when ``$FEDKERNELS_DATA_NO_FALLBACK`` is ``1``."""
    roots = [Path(data_dir_arg).expanduser()] if data_dir_arg else []
    roots.append(data_dir())
    if os.environ.get(NO_FALLBACK_ENV_VAR) != "1":
        roots += [Path("data"), Path("..") / "shared" / "data"]
    out: list[Path] = []
    for r in roots:
        if r not in out:
            out.append(r)
    return out


def find_in(root: Path, names: list[str]) -> Path | None:
    """The entry of ``root`` named like one of ``names`` (exactly first, then in any case)."""
    for name in names:
        if (root / name).exists():
            return root / name
    try:
        entries = {p.name.casefold(): p for p in root.iterdir()}
    except OSError:
        return None
    for name in names:
        hit = entries.get(name.casefold())
        if hit is not None:
            return hit
    return None


def is_bare_name(spec: str) -> bool:
    """A name, not a path: no folder separator, not ``.``/``..``, not empty."""
    return bool(spec) and spec not in (".", "..") and os.sep not in spec and (os.altsep or "/") not in spec


@dataclass(frozen=True)
class FoundDataset:
    """Where a dataset name was found (:func:`find_dataset`).

    Attributes:
        path: the folder (or file) a run reads.
        fetched: whether ``fedkernels data get`` made it (it holds :data:`MARKER`; a run checks its files
            against the recorded SHA-256s); ``False`` for a copy placed there by hand, read as it is.
    """

    path: Path
    fetched: bool


def dataset_names(name: str) -> list[str]:
    """The names a folder of dataset ``name`` may have: ``name``, then, for a registered dataset, its
    registry name and aliases (each matched in any case by :func:`find_in`)."""
    remote = find_remote(name)
    return [name, *([remote.name, *remote.aliases] if remote is not None else [])]


def find_dataset(name: str, data_dir_arg: str | Path | None = None) -> FoundDataset | None:
    """Where the bare dataset name ``name`` is found: the first folder of :func:`data_roots`
    (``data_dir_arg``, i.e. ``--data-dir``; the data folder, ``./data``, ``../shared/data``) holding an
    entry named like one of :func:`dataset_names` (exactly first, then in any case); ``None`` if none
    does or ``name`` is a path. ``fedkernels run`` reads what this finds, and ``fedkernels data list``
    reports it, so the two always agree.
    """
    if not is_bare_name(name):
        return None
    names = dataset_names(name)
    for root in data_roots(data_dir_arg):
        hit = find_in(root, names)
        if hit is not None:
            return FoundDataset(hit, (hit / MARKER).is_file())
    return None


def dataset_status(name: str, data_dir_arg: str | Path | None = None) -> str:
    """What ``fedkernels data list`` says of a registered dataset, from :func:`find_dataset`:
    ``"downloaded"`` (a ``data get`` copy in the data folder), ``"downloaded: PATH"`` (one elsewhere),
    ``"found: PATH"`` (a copy placed by hand, which a run reads as it is), ``"not downloaded"``, or
    ``"manual download"`` (no direct URL recorded: ``fedkernels data info NAME`` says where to get it)."""
    found = find_dataset(name, data_dir_arg)
    if found is not None:
        home = Path(data_dir_arg).expanduser() if data_dir_arg else data_dir()
        if found.fetched:
            return "downloaded" if found.path.parent == home else f"downloaded: {found.path}"
        return f"found: {found.path}"
    remote = find_remote(name)
    if remote is not None and any(f.url is None for f in remote.files):
        return "manual download"
    return "not downloaded"
