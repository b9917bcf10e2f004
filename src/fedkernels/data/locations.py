"""Where datasets live: one data folder, and how a bare dataset name is found.

The data folder is ``$FEDKERNELS_DATA_DIR``, else ``$XDG_CACHE_HOME/fedkernels/data`` (default
``~/.cache/fedkernels/data``). ``fedkernels data get NAME`` downloads into it, and a bare name
(``bibtex``) given to ``--dataset``, a config file or a preset is looked up there and in the other
roots of :func:`data_roots`, in any case. ``FEDKERNELS_DATA`` (which once named only the folder of
datasets by name) is read as a deprecated alias when ``FEDKERNELS_DATA_DIR`` is unset.
``FEDKERNELS_DATA_NO_FALLBACK=1`` leaves ``./data`` and ``../shared/data`` out of that search, so a
bare name is found only where it was put on purpose (the test suite sets it).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

ENV_VAR = "FEDKERNELS_DATA_DIR"
DEPRECATED_ENV_VAR = "FEDKERNELS_DATA"
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
