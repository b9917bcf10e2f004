"""``fedkernels info``: where the package is and what it runs with, then the build facts and the
registered algorithms.

The first lines need no torch and are printed at once; the build facts come from the compiled
extension and the algorithms from the registry, which load torch (seconds on a busy machine).
"""

from __future__ import annotations

import argparse
import platform
from importlib import metadata

from .standalone import load, package_dir


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def fast_facts() -> list[str]:
    """What ``info`` says without importing torch: the package folder, Python, the installed torch
    (its distribution's version, not the module) and the data folder."""
    return [
        f"package: {package_dir()}",
        f"python {platform.python_version()}; torch {_installed('torch')} installed",
        f"data folder: {load('data/locations.py').data_dir()}",
    ]


def cmd_info(args: argparse.Namespace) -> int:
    """Print the torch-free facts, then the build facts and the registered algorithms."""
    for line in fast_facts():
        print(line, flush=True)
    from fedkernels._info import info
    from fedkernels.fl.registry import strategies

    print(info())
    print("algorithms: " + ", ".join(c.name for c in strategies().values()))
    return 0
