"""``fedkernels bench [NAME ...]``: list or run the benchmarks of a checkout (``bench/ops/*.py``, ``bench/fl/*.py``)."""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

# src/fedkernels_cli/bench.py: the folders this package may have been built from, nearest first
_CHECKOUTS = Path(__file__).resolve().parents[1:3]
_SRC = Path(__file__).resolve().parents[1]  # the folder holding the fedkernels package (and this one)
# bench/ops: the op microbenchmarks; bench/fl: the federated experiments. Script names are unique across both.
BENCH_FOLDERS = ("ops", "fl")


def bench_root() -> Path | None:
    """The ``bench`` folder of the current folder or of the checkout this package was built from."""
    for root in (Path.cwd(), *_CHECKOUTS):
        if any(p for folder in BENCH_FOLDERS for p in (root / "bench" / folder).glob("*.py")):
            return root / "bench"
    return None


def find_bench(name: str) -> Path | None:
    """``bench/ops/<name>.py`` or ``bench/fl/<name>.py`` in the current folder or in the checkout this package
    was built from."""
    for root in (Path.cwd(), *_CHECKOUTS):
        for folder in BENCH_FOLDERS:
            path = root / "bench" / folder / f"{name}.py"
            if path.is_file():
                return path
    return None


def list_benches(root: Path) -> list[tuple[str, str]]:
    """``(name, first docstring line)`` of every runnable ``bench/ops/*.py`` and ``bench/fl/*.py`` (the helpers
    are left out)."""
    out = []
    for path in [p for folder in BENCH_FOLDERS for p in sorted((root / folder).glob("*.py"))]:
        text = path.read_text()
        if path.stem.endswith("_worker") or "__main__" not in text:
            continue  # helpers, and the peers' worker processes the benches start themselves
        try:
            doc = ((ast.get_docstring(ast.parse(text)) or "").strip().splitlines() or [""])[0]
        except SyntaxError:
            doc = "(does not parse)"
        out.append((path.stem, re.sub(r"\s*\((?:issue|#)\s*#?\d+[^)]*\)", "", doc)))  # no tracker references
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    """Run ``bench/<name>.py`` with the remaining arguments; with no name, list the benches."""
    if args.name is None:
        root = bench_root()
        if root is None:
            print("fedkernels bench: no bench/ folder found; run it from a fedkernels checkout", file=sys.stderr)
            return 2
        benches = list_benches(root)
        width = max((len(n) for n, _ in benches), default=0)
        print(f"benchmarks in {root} (run: fedkernels bench NAME [--help]):")
        for name, doc in benches:
            print(f"  {name:<{width}}  {doc}")
        return 0
    path = find_bench(args.name)
    if path is None:
        print(
            f"fedkernels bench: bench/{args.name}.py not found; `fedkernels bench` lists the benches of a checkout",
            file=sys.stderr,
        )
        return 2
    # Run as a module of its checkout (python -m bench.ops.x): the benches import `bench` from the checkout root.
    env = dict(os.environ)
    checkout = path.parents[2]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), str(_SRC), env.get("PYTHONPATH")]))
    module = f"bench.{path.parent.name}.{path.stem}"
    return subprocess.call([sys.executable, "-m", module, *args.bench_args], env=env)
