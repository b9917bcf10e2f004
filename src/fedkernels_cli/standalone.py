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
STANDALONE = ("data/remote.py", "data/locations.py")


def package_dir() -> Path:
    """The folder ``import fedkernels`` would load, found without running it."""
    spec = importlib.util.find_spec("fedkernels")  # a top-level name: finding it runs nothing
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the fedkernels package is not installed")
    return Path(spec.origin).parent


def load(relpath: str) -> ModuleType:
    """The module ``fedkernels/<relpath>`` (one of :data:`STANDALONE`): the package's own if it is already
    imported (so what was registered at run time, e.g. with :func:`fedkernels.data.register`, shows),
    else run from its file under a private name (``fedkernels_cli.standalone.<stem>``) so the package
    itself stays unimported.

    Raises:
        ValueError: ``relpath`` is not in :data:`STANDALONE`.
    """
    if relpath not in STANDALONE:
        raise ValueError(f"{relpath!r} is not a standard-library-only module of fedkernels: {STANDALONE}")
    dotted = relpath.removesuffix(".py").replace("/", ".")
    if f"fedkernels.{dotted}" in sys.modules:
        return sys.modules[f"fedkernels.{dotted}"]
    name = f"{__name__}.{dotted.replace('.', '_')}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, package_dir() / relpath)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the body runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


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
