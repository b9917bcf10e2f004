"""The fedkernels package's files that need no torch, read without importing the package.

Importing anything inside ``fedkernels`` runs ``fedkernels/__init__.py``, which loads torch and the
compiled extension (seconds). The commands that only list things (``data list``, ``run --list-presets``)
find the package where Python would import it from and read what they need from there: the preset
files, and the modules in :data:`STANDALONE`, which import only the standard library
(``python_tests/experiments/test_cli_entry.py`` checks that they do).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

# modules of fedkernels (paths below the package folder) that import only the standard library
STANDALONE = ("data/remote.py", "data/locations.py", "_build_facts.py")


def package_dir() -> Path:
    """The folder ``import fedkernels`` would load, found without running it."""
    spec = importlib.util.find_spec("fedkernels")  # a top-level name: finding it runs nothing
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the fedkernels package is not installed")
    return Path(spec.origin).parent


def compiled_module() -> Path | None:
    """The file ``import fedkernels._C`` would load, or ``None`` if there is none. Found the way the import
    system finds it (each finder asked with the package's search path: an editable install's redirect
    included) without running the package."""
    spec = importlib.util.find_spec("fedkernels")
    if spec is None or spec.submodule_search_locations is None:
        return None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        found = find("fedkernels._C", spec.submodule_search_locations) if find is not None else None
        if found is not None and found.origin:
            return Path(found.origin)
    return None


def load(relpath: str) -> ModuleType:
    """The module ``fedkernels/<relpath>`` (one of :data:`STANDALONE`): the package's own if it is already
    imported (so what was registered at run time, e.g. with :func:`fedkernels.data.register`, shows),
    else run from its file under a private stand-in package (:data:`STAND_IN`) so the package itself
    stays unimported.

    Raises:
        ValueError: ``relpath`` is not in :data:`STANDALONE`.
    """
    if relpath not in STANDALONE:
        raise ValueError(f"{relpath!r} is not a standard-library-only module of fedkernels: {STANDALONE}")
    dotted = relpath.removesuffix(".py").replace("/", ".")
    if f"fedkernels.{dotted}" in sys.modules:
        return sys.modules[f"fedkernels.{dotted}"]
    _stand_ins(dotted)
    return importlib.import_module(f"{STAND_IN}.{dotted}")


# A private stand-in for the package: the standalone modules run under it, so their relative imports
# (``from .remote import ...``) resolve to the sibling files without running any ``__init__.py``.
STAND_IN = f"{__name__}_fedkernels"


def _stand_ins(dotted: str) -> None:
    """Empty package modules for the stand-in and each folder above ``dotted``, pointing at the files."""
    folder, name = package_dir(), STAND_IN
    parts = dotted.split(".")[:-1]
    for part in [None, *parts]:
        if part is not None:
            folder, name = folder / part, f"{name}.{part}"
        if name not in sys.modules:
            module = ModuleType(name)
            module.__path__ = [str(folder)]
            module.__package__ = name
            sys.modules[name] = module


def preset_files() -> list[Path]:
    """The shipped preset files (``fedkernels/experiments/presets/*.toml``), sorted by name."""
    return sorted((package_dir() / "experiments" / "presets").glob("*.toml"), key=lambda p: p.stem)


def read_toml(path: Path) -> dict:
    """A TOML file as a dict (``tomllib``, or ``tomli`` on Python 3.10)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib.loads(path.read_text())
