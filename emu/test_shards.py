"""Run one pytest command over test files split into shards: one process per shard, one per core at a time.

The AddressSanitizer runs (tools/ci/sanitize.sh, ``emu/emulate.py test --checks asan``) run pytest in
one process without xdist, so an ASan report aborts the run and its text reaches stderr. On a 2-core
CI machine that leaves a core idle for minutes. Shards keep both properties (each shard is one such
process; a report aborts it and fails the whole run) and use every core. More shards than cores
(default: three per core, largest first) keep the cores busy to the end.

    python emu/test_shards.py [--shards N] [--jobs J] -- CMD ARGS... -- TESTS_AND_PYTEST_ARGS...

Arguments after the second ``--`` that name test files (``*.py``, ``file::test``) or directories are
split between the shards; the others (``-k expr``, ``-x``, ...) go to every shard. Each shard's output
is kept in a temporary file and printed whole when it ends, so shards do not interleave.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import typing
from pathlib import Path


def is_test_path(arg: str, cwd: Path | None = None) -> bool:
    """True for a pytest argument that names tests (a file, a file::node id or a directory)."""
    return arg.endswith(".py") or "::" in arg or (not arg.startswith("-") and (Path(cwd or ".") / arg).is_dir())


def default_shards() -> int:
    """FK_TEST_SHARDS if set, else three shards per core (the ASan runs' callers share this default)."""
    return int(os.environ.get("FK_TEST_SHARDS", 3 * (os.cpu_count() or 1)))


def split(paths: list[str], shards: int, cwd: Path | None = None) -> list[list[str]]:
    """Greedy split of ``paths`` into at most ``shards`` groups of similar total file size.

    File size is only a rough stand-in for run time (a few small files hold the slowest tests), which
    is why run() takes more shards than cores; the largest file goes first into the lightest group.
    Empty groups are dropped; the heaviest group comes first.
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")

    def size(p: str) -> int:
        f = Path(cwd or ".") / p.split("::", 1)[0]
        return f.stat().st_size + 1 if f.is_file() else 1  # + 1: empty files still spread over the groups

    groups: list[list[str]] = [[] for _ in range(shards)]
    loads = [0] * shards
    for p in sorted(paths, key=size, reverse=True):
        i = loads.index(min(loads))
        groups[i].append(p)
        loads[i] += size(p)
    order = sorted(range(shards), key=lambda i: -loads[i])  # largest first: it starts first
    return [sorted(groups[i]) for i in order if groups[i]]


def run(
    command: list[str],
    pytest_args: list[str],
    shards: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    jobs: int | None = None,
) -> int:
    """Run ``command + shard`` for every shard, at most ``jobs`` (default: one per core) at a time, in
    ``cwd`` with ``env``; returns 0 only if every shard returned 0 (else the first failure's code).

    More shards than jobs balance the cores: a job that ends early takes the next shard (largest first).
    """
    jobs = max(1, jobs or os.cpu_count() or 1)
    paths = [a for a in pytest_args if is_test_path(a, cwd)]
    shared = [a for a in pytest_args if not is_test_path(a, cwd)]
    groups = split(paths, shards, cwd) if paths else [[]]
    worst = 0
    with contextlib.ExitStack() as stack:
        pending = list(enumerate(groups))
        active: list[tuple[int, typing.IO[str], subprocess.Popen]] = []
        while pending or active:
            while pending and len(active) < jobs:
                i, group = pending.pop(0)
                log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
                cmd = [*command, *shared, *group]
                # FK_TEST_SHARD names the shard, so per-process outputs (the emulator's coverage) do not collide
                shard_env = dict(os.environ if env is None else env, FK_TEST_SHARD=str(i + 1))
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=shard_env, cwd=cwd)
                active.append((i, log, proc))
            done = [a for a in active if a[2].poll() is not None]
            if not done:
                time.sleep(0.1)
                continue
            for i, log, proc in done:
                active.remove((i, log, proc))
                log.seek(0)
                print(f"--- shard {i + 1} of {len(groups)} (exit {proc.returncode}) ---", flush=True)
                sys.stdout.write(log.read())
                sys.stdout.flush()
                if proc.returncode != 0 and worst == 0:
                    worst = proc.returncode
    return worst


def main(argv: list[str]) -> int:
    if argv.count("--") < 2:
        raise SystemExit("usage: test_shards.py --shards N -- CMD ARGS... -- TESTS_AND_PYTEST_ARGS...")
    first = argv.index("--")
    second = argv.index("--", first + 1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=default_shards(), help="groups of test files")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="shards running at once")
    a = ap.parse_args(argv[:first])
    command = argv[first + 1 : second]
    if not command:
        raise SystemExit("test_shards: no command between the two '--'")
    return run(command, argv[second + 1 :], a.shards, jobs=a.jobs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
