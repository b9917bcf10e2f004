"""The Makefile's install step: `make demo` builds and installs only when what the build reads changed.

Run in a copy of the build inputs with a fake venv whose ``python`` and ``fedkernels`` only print their
arguments, so no test compiles anything; file times are set explicitly (no sleeps).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _checkout(tmp_path: Path) -> Path:
    """A folder with the Makefile, the build files and csrc/, and a fake ``.venv``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("Makefile", "pyproject.toml", "CMakeLists.txt"):
        shutil.copy2(ROOT / name, repo / name)
    for name in ("cmake", "csrc"):
        shutil.copytree(ROOT / name, repo / name)
    (repo / "src" / "fedkernels").mkdir(parents=True)
    (repo / "src" / "fedkernels" / "mod.py").write_text("x = 1\n")
    bin_dir = repo / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("python", "fedkernels"):
        (bin_dir / tool).write_text(f'#!/bin/sh\necho "FAKE-{tool}" "$@"\n')
        (bin_dir / tool).chmod(0o755)
    torch_dir = repo / ".venv" / "lib" / "python3.11" / "site-packages" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "version.py").write_text("__version__ = '2.13.0'\n")
    # every input older than anything the test does next
    for p in repo.rglob("*"):
        os.utime(p, (1_000_000, 1_000_000))
    return repo


def _make(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV")}
    proc = subprocess.run(["make", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _installs(out: str) -> bool:
    return "FAKE-python -m pip install" in out


def _newer(path: Path, than: Path) -> None:
    """Make ``path`` just newer than ``than`` (by a microsecond: older than the next touch of ``than``)."""
    t = than.stat().st_mtime_ns + 1000
    os.utime(path, ns=(t, t))


def test_demo_installs_once_then_only_when_a_build_input_changes(tmp_path):
    repo = _checkout(tmp_path)
    stamp = repo / ".venv" / ".fedkernels-install"
    first = _make(repo, "demo")
    assert _installs(first) and stamp.is_file()
    assert "FAKE-fedkernels run --demo" in first
    again = _make(repo, "demo")
    assert not _installs(again), again
    assert "FAKE-fedkernels run --demo" in again
    # a Python edit needs no reinstall (the editable install points at src/)
    _newer(repo / "src" / "fedkernels" / "mod.py", stamp)
    assert not _installs(_make(repo, "demo"))
    # each thing the build reads triggers one
    torch_version = next((repo / ".venv" / "lib").glob("python*/site-packages/torch/version.py"))
    for changed in (
        repo / "csrc" / "ops.cpp",
        repo / "CMakeLists.txt",
        repo / "pyproject.toml",
        next((repo / "cmake").glob("*.cmake")),
        torch_version,
    ):
        _newer(changed, stamp)
        assert _installs(_make(repo, "demo")), changed
        assert not _installs(_make(repo, "demo")), changed


def test_a_new_source_file_and_reinstall_trigger_a_build(tmp_path):
    repo = _checkout(tmp_path)
    _make(repo, "install")
    stamp = repo / ".venv" / ".fedkernels-install"
    new = repo / "csrc" / "common" / "new_op_cpu.cpp"
    new.write_text("// new\n")
    _newer(new, stamp)
    assert _installs(_make(repo, "demo"))
    assert _installs(_make(repo, "reinstall"))
    assert not _installs(_make(repo, "install"))


def test_a_failed_install_leaves_no_stamp(tmp_path):
    repo = _checkout(tmp_path)
    (repo / ".venv" / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "demo"], cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert not (repo / ".venv" / ".fedkernels-install").exists()
