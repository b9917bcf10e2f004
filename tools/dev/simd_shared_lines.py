"""Print how much of each per-level SIMD source pair is the same text (issue 46: one source per kernel).

A pair is csrc/<dir>/<name>_avx2.cpp with csrc/<dir>/<name>_avx512.cpp. Shared lines are the lines a
diff matches between the two (difflib, after stripping whitespace, blank lines ignored); the share is
shared / lines of the larger file. The number to watch is `shared`, the lines written twice: a pair
whose files only instantiate a common body (csrc/*/*_body_x86.h, counted once, in no pair) shares
just its include lines, which can still be most of a seven-line file.

Usage: python tools/dev/simd_shared_lines.py [--root DIR]
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def code_lines(path: Path) -> list[str]:
    """The file's non-blank lines, whitespace-stripped (clang-format rewraps differ between pairs)."""
    return [s for line in path.read_text().splitlines() if (s := line.strip())]


def shared(a: list[str], b: list[str]) -> int:
    """Lines matched by a longest-common-subsequence style diff of a and b."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks())


def pairs(root: Path) -> list[tuple[Path, Path]]:
    """Every (avx2, avx512) source pair under root/csrc, sorted by path."""
    found = []
    for avx2 in sorted((root / "csrc").rglob("*_avx2.cpp")):
        avx512 = avx2.with_name(avx2.name.replace("_avx2.cpp", "_avx512.cpp"))
        if avx512.exists():
            found.append((avx2, avx512))
    return found


def main() -> int:
    """Print one line per pair: lines of each file, shared lines, share of the larger file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    root = parser.parse_args().root.resolve()
    print(f"{'pair':40} {'avx2':>5} {'avx512':>6} {'shared':>6} {'share':>6}")
    for avx2, avx512 in pairs(root):
        a, b = code_lines(avx2), code_lines(avx512)
        n = shared(a, b)
        name = str(avx2.relative_to(root)).replace("_avx2.cpp", "_{avx2,avx512}.cpp")
        print(f"{name:40} {len(a):5d} {len(b):6d} {n:6d} {n / max(len(a), len(b), 1):6.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
