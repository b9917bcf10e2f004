"""Fail when a __global__ kernel of the project was never launched in an emulated test run.

    python emu/coverage_check.py COUNTS.json [COUNTS.json.gw0 ...]

Each file is what `pytest --emulate-cuda --emu-coverage=FILE` wrote (one per xdist worker, FILE.gwN).
The kernels required are every __global__ function defined in csrc/*/*.cu and csrc/*/*.cuh (the
emulator's own self-test kernels in emu/selftest are not the project's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# rewrite.py sits beside this file: a sibling when run by path, emu.rewrite when imported.
if __package__:
    from .rewrite import global_kernels
else:
    from rewrite import global_kernels

ROOT = Path(__file__).resolve().parents[1]


def project_kernels(root: Path = ROOT) -> set[str]:
    """Names of the __global__ functions in the project's CUDA sources."""
    files = sorted(root.glob("csrc/*/*.cu")) + sorted(root.glob("csrc/*/*.cuh"))
    return {name for f in files for name in global_kernels(f.read_text())}


def merge_counts(paths: list[Path]) -> dict[str, int]:
    """Launch counts summed over the given coverage files."""
    total: dict[str, int] = {}
    for p in paths:
        for name, n in json.loads(p.read_text()).items():
            total[name] = total.get(name, 0) + int(n)
    return total


def never_launched(required: set[str], counts: dict[str, int]) -> list[str]:
    return sorted(k for k in required if counts.get(k, 0) == 0)


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv]
    if not paths or not all(p.is_file() for p in paths):
        print(f"coverage_check: need existing coverage files, got {argv}", file=sys.stderr)
        return 2
    required = project_kernels()
    counts = merge_counts(paths)
    missing = never_launched(required, counts)
    print(
        f"coverage_check: {len(required) - len(missing)} of {len(required)} __global__ kernels launched "
        f"({sum(counts.get(k, 0) for k in required)} launches)"
    )
    for name in missing:
        print(f"  never launched: {name}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
