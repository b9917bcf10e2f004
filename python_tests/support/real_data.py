"""The real datasets some tests read, and the reason they skip without them.

A test that needs one is marked ``@pytest.mark.real_data("bibtex", ...)`` and reads its folder from
:func:`dataset` (module level is fine: the path is computed, never required, at import). Without
the folder the test skips, saying where it looked and how to get it; collection never fails.

Where: ``$FEDKERNELS_DATA_DIR`` alone when it is set (``FEDKERNELS_DATA_DIR=/nonexistent`` is the run
a user's fresh clone gets: CI's ``make test``); else ``../shared/data`` beside the checkout, then the
data folder ``fedkernels data get`` downloads into (``~/.cache/fedkernels/data``). A name matches a
folder in any case (``get`` makes ``Bibtex``, the checkout's sibling has ``bibtex``).
"""

from __future__ import annotations

import os
from pathlib import Path

from fedkernels.data.locations import DEPRECATED_ENV_VAR, ENV_VAR, find_in
from fedkernels.data.locations import data_dir as download_dir
from fedkernels.data.remote import find_remote

from .paths import ROOT

SIBLING = ROOT.parent / "shared" / "data"


def _roots() -> list[Path]:
    chosen = os.environ.get(ENV_VAR) or os.environ.get(DEPRECATED_ENV_VAR)
    if chosen:
        return [Path(chosen).expanduser()]
    return [SIBLING, download_dir()]


# The folders searched, in order: read once, at import (collection), before any test's monkeypatch
# points the data folder at its own temporary one. The last is where `fedkernels data get` downloads.
ROOTS = _roots()


def find(name: str) -> Path | None:
    """The folder of the real dataset ``name`` (any case), or ``None`` where no root has it."""
    for root in ROOTS:
        hit = find_in(root, [name])
        if hit is not None and hit.is_dir():
            return hit
    return None


def dataset(name: str) -> Path:
    """The folder of ``name``: where it was found, else where it would be (its test skips then)."""
    return find(name) or ROOTS[0] / name


def missing_reason(names: tuple[str, ...]) -> str | None:
    """Why a test needing ``names`` cannot run here (the first missing one), or ``None`` when all are found."""
    for name in names:
        if find(name) is not None:
            continue
        looked = " and ".join(str(r) for r in ROOTS)
        remote = find_remote(name)
        if remote is not None:
            how = f"`fedkernels data get {remote.name}` downloads it into {ROOTS[-1]}"
        else:
            where = "there" if len(ROOTS) == 1 else "in one of them"
            how = f"{name} is not in `fedkernels data list`: put its folder (XC text format) {where}"
        return (
            f"needs the real dataset {name!r}, not found in {looked}; {how}, "
            f"or set {ENV_VAR} to the folder that holds it"
        )
    return None
