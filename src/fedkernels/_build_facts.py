"""What this build is, said without importing torch: the facts recorded beside the compiled module at
build time, the CPU level its kernels run at here, and the summary lines of ``fedkernels info``.

The build writes ``_build_info.json`` next to ``_C`` (cmake/build_info.cmake) from the same CMake
variables the module's ``build_info()`` reports. The CPU level is decided as csrc/common/cpu_isa.cpp
decides it: this CPU's flags (``/proc/cpuinfo``), capped by ``FK_CPU_ISA``. Standard library only:
``fedkernels info`` loads this file without the package (fedkernels_cli/standalone.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

RECORD = "_build_info.json"
LEVELS = ("generic", "avx2", "avx512")
# The CPU flags each level needs: what cpu_isa.cpp asks __builtin_cpu_supports for (Linux lists a flag
# only when the OS also saves the registers it needs, as that check requires).
LEVEL_FLAGS = {"avx2": ("avx2", "fma", "f16c"), "avx512": ("avx2", "fma", "f16c", "avx512f", "avx512vl")}
# The record's keys: the build facts, each also a key of fedkernels._C.build_info().
BUILD_KEYS = ("version", "torch_version", "cuda_kernels", "cuda_archs", "cpu_levels", "compiler", "cuda_compiler")
NOT_CHECKED = "not checked (needs torch: fedkernels info --runtime)"
# The whitespace C's isspace() drops from FK_CPU_ISA (the "C" locale).
_C_SPACE = " \t\n\v\f\r"


def read_record(module_file: Path) -> dict | None:
    """The build record beside the compiled module ``module_file``, or ``None`` when there is none, it is
    unreadable, or it names another module file (a record another build left there)."""
    try:
        record = json.loads((module_file.parent / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("module") != module_file.name:
        return None
    if any(key not in record for key in BUILD_KEYS):
        return None
    return record


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags of the first processor in ``/proc/cpuinfo`` text (``flags`` on x86)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def host_level(cpu_levels: list[str], cpuinfo: str | None) -> str | None:
    """The highest level this CPU supports, as the build's detection sees it: ``generic`` for a build
    with no x86 levels (it never asks the CPU), else from ``cpuinfo``; ``None`` when that is unknown."""
    if cpu_levels == ["generic"]:
        return "generic"
    if cpuinfo is None:
        return None
    flags = cpu_flags(cpuinfo)
    best = "generic"
    for level, needs in LEVEL_FLAGS.items():
        if all(flag in flags for flag in needs):
            best = level
    return best


def level_in_use(host: str | None, cap: str) -> tuple[str | None, str | None]:
    """``(level, error)``: the level the kernels run at given the host's and ``FK_CPU_ISA``'s value
    ``cap`` (``""`` when unset): the lower of the two, spaces and case ignored. ``error`` is the message
    ``import fedkernels`` fails with for an unknown ``cap`` (then ``level`` is ``None``)."""
    value = "".join(ch for ch in cap if ch not in _C_SPACE).lower()
    if value and value not in LEVELS:
        return None, (
            f"FK_CPU_ISA='{cap}' is not a CPU level: use avx512, avx2 or generic (case-insensitive), or unset "
            "it for the best level this CPU supports"
        )
    if host is None:
        return None, None
    if not value:
        return host, None
    return LEVELS[min(LEVELS.index(host), LEVELS.index(value))], None


def facts(record: Mapping, environ: Mapping[str, str], cpuinfo: str | None) -> dict:
    """The keys of ``fedkernels._C.build_info()`` that need no torch: the record's build facts, and
    ``cpu_isa`` / ``cpu_isa_host`` / ``cpu_isa_cap`` from ``cpuinfo`` (``/proc/cpuinfo``'s text, ``None``
    where there is none) and ``environ``'s ``FK_CPU_ISA``. A level not known here is ``None``;
    ``cpu_isa_error`` holds the import error an unknown ``FK_CPU_ISA`` causes (``None`` when fine)."""
    d = {key: record[key] for key in BUILD_KEYS}
    cap = environ.get("FK_CPU_ISA", "")
    host = host_level(list(record["cpu_levels"]), cpuinfo)
    level, error = level_in_use(host, cap)
    d.update(cpu_isa=level, cpu_isa_host=host, cpu_isa_cap=cap, cpu_isa_error=error)
    return d


def read_cpuinfo() -> str | None:
    """``/proc/cpuinfo``, or ``None`` where the system has none (not Linux)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_isa_line(d: Mapping) -> str:
    """The CPU level in use and why, e.g. ``avx2 (host supports avx2; FK_CPU_ISA unset)``."""
    level, host, cap = d["cpu_isa"], d["cpu_isa_host"], d["cpu_isa_cap"]
    if d.get("cpu_isa_error"):
        return f"error: {d['cpu_isa_error']} (import fedkernels fails with this)"
    if host is None:
        return "not checked: no /proc/cpuinfo here (fedkernels info --runtime asks the module)"
    if not cap:
        why = "FK_CPU_ISA unset"
    elif "".join(ch for ch in cap if ch not in _C_SPACE).lower() == level:
        why = f"FK_CPU_ISA={cap}"
    else:
        why = f"FK_CPU_ISA={cap} is above the host: its {level} runs"
    return f"{level} (host supports {host}; {why})"


def summary(d: Mapping) -> list[str]:
    """The lines ``fedkernels info`` prints about the build: from :func:`facts` (no torch) or from
    ``fedkernels._info.build_info()``, whose runtime keys (``torch_runtime``, ``gpu_available``,
    ``threads``) are printed where present and marked not checked where absent."""
    running = f" (running torch {d['torch_runtime']})" if "torch_runtime" in d else ""
    cuda = "no"
    if d["cuda_kernels"]:
        cuda = f"yes, archs {d['cuda_archs'] or 'torch default'}"
        cuda += f" ({d['cuda_compiler']})" if d.get("cuda_compiler") else ""
    lines = [
        f"fedkernels {d['version']}",
        f"built against torch {d['torch_version']}{running}",
        f"CUDA kernels: {cuda}",
        f"GPU available: {d.get('gpu_available', NOT_CHECKED)}",
        f"threads: {d.get('threads', NOT_CHECKED)}",
        f"CPU kernels: {cpu_isa_line(d)}",
    ]
    if "compiler" in d:  # a module built before the build recorded its compiler has no such key
        lines.append(f"compiled by {d['compiler']}; CPU levels {', '.join(d['cpu_levels'])}")
    return lines
