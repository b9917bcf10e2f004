"""CMakeLists.txt configures without warnings against the running interpreter's torch (docs/install.md):
torch's CMake files no longer warn that kineto is missing, and _C has no build-tree RPATH, so CMake no
longer warns that torch/lib's libgomp.so.1 may hide the system one. Configure only (seconds): nothing
is compiled."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT

BIN = str(Path(sys.executable).parent)
CMAKE = shutil.which("cmake", path=BIN) or shutil.which("cmake")
NINJA = shutil.which("ninja", path=BIN) or shutil.which("ninja")

pytestmark = pytest.mark.skipif(
    not (CMAKE and NINJA and shutil.which("g++")), reason="needs cmake, ninja and g++ (the build's own tools)"
)


def test_configure_prints_no_cmake_warning_and_sets_no_build_rpath(tmp_path):
    build = tmp_path / "build"
    proc = subprocess.run(
        [
            str(CMAKE),
            "-S",
            str(ROOT),
            "-B",
            str(build),
            "-G",
            "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={NINJA}",
            f"-DPython_EXECUTABLE={sys.executable}",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DFK_CUDA=OFF",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "CMake Warning" not in out, out
    assert "Found Torch" in out  # the warnings came from find_package(Torch) and the module's link
    link = [line for line in (build / "build.ninja").read_text().splitlines() if "LINK_LIBRARIES" in line]
    assert link and not any("-rpath" in line for line in link), link
    assert "kineto" not in (build / "CMakeCache.txt").read_text()  # no path of this venv cached for it
