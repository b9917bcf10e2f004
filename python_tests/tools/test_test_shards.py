"""emu/test_shards.py (the sharded runner of the AddressSanitizer test runs, CI steps 1b and 1c); tested here, not
in python_tests/emu/, so the emulated and sanitized op runs do not run it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emu import test_shards

ECHO = [sys.executable, "-c", "import sys; print('ARGS', *sys.argv[1:]); sys.exit(int('fail' in sys.argv[1:]))"]


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), max_size=12), shards=st.integers(1, 5))
def test_split_keeps_every_file_once_and_balances(tmp_path_factory, sizes: list[int], shards: int) -> None:
    d = tmp_path_factory.mktemp("files")
    paths = []
    for i, n in enumerate(sizes):
        (d / f"test_{i}.py").write_bytes(b"x" * n)
        paths.append(str(d / f"test_{i}.py"))
    groups = test_shards.split(paths, shards)
    flat = [p for g in groups for p in g]
    assert sorted(flat) == sorted(paths)
    assert len(groups) <= shards and all(groups)
    if groups:  # greedy (largest first) on size + 1: no group exceeds the lightest by more than the largest file
        loads = [sum(Path(p).stat().st_size + 1 for p in g) for g in groups]
        if len(groups) == shards:
            assert max(loads) - min(loads) <= max(sizes) + 1
        assert loads == sorted(loads, reverse=True)  # the heaviest group comes first


def test_split_rejects_zero_shards() -> None:
    with pytest.raises(ValueError, match="shards must be >= 1"):
        test_shards.split(["a.py"], 0)


def test_run_passes_options_to_every_shard_and_files_to_one(tmp_path: Path, capsys) -> None:
    files = []
    for i in range(3):
        (tmp_path / f"t{i}.py").write_text("#" * (i + 1))
        files.append(f"t{i}.py")
    rc = test_shards.run(ECHO, ["-q", *files], shards=2, cwd=tmp_path)
    out = capsys.readouterr().out
    assert rc == 0
    lines = [line.split()[1:] for line in out.splitlines() if line.startswith("ARGS")]
    assert len(lines) == 2 and all(args[0] == "-q" for args in lines)
    assert sorted(a for args in lines for a in args[1:]) == files
    assert "shard 1 of 2 (exit 0)" in out and "shard 2 of 2 (exit 0)" in out


def test_run_fails_when_any_shard_fails(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.py").write_text("a")
    (tmp_path / "b.py").write_text("bb")
    # the option 'fail' reaches both shards: each exits 1, and so does the run
    assert test_shards.run(ECHO, ["fail", "a.py", "b.py"], shards=2, cwd=tmp_path) == 1
    assert "(exit 1)" in capsys.readouterr().out
    # a shard that aborts (as ASan does on a report) fails the run too
    abort = [sys.executable, "-c", "import os, sys; os.abort() if 'b.py' in sys.argv else None"]
    assert test_shards.run(abort, ["a.py", "b.py"], shards=2, cwd=tmp_path) != 0


def test_main_needs_two_separators() -> None:
    with pytest.raises(SystemExit, match="usage"):
        test_shards.main(["--shards", "2", "--", "python"])


def test_run_with_one_job_runs_every_shard_in_turn(tmp_path: Path, capsys) -> None:
    files = []
    for i in range(5):
        (tmp_path / f"t{i}.py").write_text("#" * (5 - i))
        files.append(f"t{i}.py")
    assert test_shards.run(ECHO, files, shards=5, cwd=tmp_path, jobs=1) == 0
    out = capsys.readouterr().out
    # one file per shard, largest first, each shard's output printed whole after it ends
    shards = [line for line in out.splitlines() if line.startswith("--- shard")]
    assert shards == [f"--- shard {i} of 5 (exit 0) ---" for i in range(1, 6)]
    assert [line.split()[1] for line in out.splitlines() if line.startswith("ARGS")] == files
