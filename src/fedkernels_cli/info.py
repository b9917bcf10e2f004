"""``fedkernels info``: where the package is, what it runs with, the build facts and the registered
algorithms, without importing torch.

The build facts come from the record the build writes beside the compiled module (the same facts its
``build_info()`` reports), the CPU level from this CPU's flags and ``FK_CPU_ISA``, the algorithms from
their source. What only the running torch knows (whether a GPU is usable now, the thread count) is
printed by ``fedkernels info --runtime``, which loads torch and the module (seconds on a busy machine);
so is everything when no record sits beside the module (a module copied without it).
"""

from __future__ import annotations

import argparse
import os
import platform
from importlib import metadata

from .algorithms import algorithm_names
from .standalone import compiled_module, load, package_dir


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def fast_facts() -> list[str]:
    """What ``info`` says first: the package folder, Python, the installed torch (its distribution's
    version, not the module) and the data folder."""
    return [
        f"package: {package_dir()}",
        f"python {platform.python_version()}; torch {_installed('torch')} installed",
        f"data folder: {load('data/locations.py').data_dir()}",
    ]


def build_facts() -> dict | None:
    """``fedkernels._C.build_info()``'s keys that need no torch (:func:`fedkernels._build_facts.facts`),
    or ``None`` when no build record sits beside the compiled module."""
    module = compiled_module()
    build = load("_build_facts.py")
    record = build.read_record(module) if module is not None else None
    if record is None:
        return None
    return build.facts(record, os.environ, build.read_cpuinfo())


def runtime_lines() -> list[str]:
    """The build facts as the loaded module and torch report them, and the registry's algorithms."""
    from fedkernels._info import info
    from fedkernels.fl.registry import strategies

    return [*info().splitlines(), "algorithms: " + ", ".join(c.name for c in strategies().values())]


def cmd_info(args: argparse.Namespace) -> int:
    """Print the facts; with ``--runtime`` (or no build record) ask the loaded module and torch."""
    for line in fast_facts():
        print(line, flush=True)
    d = None if args.runtime else build_facts()
    if d is None:
        if not args.runtime:
            where = compiled_module() or "the compiled module"
            print(f"(no build record beside {where}: asking the module, which loads torch)", flush=True)
        print("\n".join(runtime_lines()))
        return 0
    build = load("_build_facts.py")
    names = algorithm_names()
    print("\n".join(build.summary(d)))
    print("algorithms: " + (", ".join(names) if names is not None else build.NOT_CHECKED))
    return 0
