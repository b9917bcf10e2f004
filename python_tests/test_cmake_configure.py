"""CMakeLists.txt configures without warnings against the running interpreter's torch (docs/install.md):
torch's CMake files no longer warn that kineto is missing, and _C's only RPATH is $ORIGIN (where
libfedkernels_ops.so lies beside it), no build-tree path, so CMake no longer warns that torch/lib's
libgomp.so.1 may hide the system one. No unit includes an ATen header (the ops are on the stable ABI,
built with TORCH_TARGET_VERSION; _C is pybind11 only), so none needs precompiled torch headers.
Configure only (seconds, once): nothing is compiled."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT
from tools.ci import cross_compile_aarch64 as cross

BIN = str(Path(sys.executable).parent)
CMAKE = shutil.which("cmake", path=BIN) or shutil.which("cmake")
NINJA = shutil.which("ninja", path=BIN) or shutil.which("ninja")

pytestmark = pytest.mark.skipif(
    not (CMAKE and NINJA and shutil.which("g++")), reason="needs cmake, ninja and g++ (the build's own tools)"
)


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """The project configured as make and pip do, into a fresh build dir: (the configure run, the build dir)."""
    build = tmp_path_factory.mktemp("cmake") / "build"
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
    return proc, build


def test_configure_prints_no_cmake_warning_and_sets_no_build_rpath(configured):
    proc, build = configured
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "CMake Warning" not in out, out
    assert "Found Torch" in out  # the warnings came from find_package(Torch) and the module's link
    link = link_libraries(build, "_C")
    assert link and re.findall(r"-rpath,(\S+)", link) == ['"\\$$ORIGIN"'], link
    assert "kineto" not in (build / "CMakeCache.txt").read_text()  # no path of this venv cached for it


def link_libraries(build: Path, target: str) -> str:
    """The LINK_LIBRARIES line of `target`'s link step in build.ninja ("" if there is none)."""
    rule = False
    for line in (build / "build.ninja").read_text().splitlines():
        if line.startswith("build "):
            rule = re.search(rf"_LINKER__{target}_(Release|Debug|RelWithDebInfo|MinSizeRel)\b", line) is not None
        elif rule and line.startswith("  LINK_LIBRARIES = "):
            return line
    return ""


def compile_flags(build: Path, target: str) -> dict[str, str]:
    """Each C++ unit of `target` (its source path, as build.ninja names it) -> its DEFINES and FLAGS lines."""
    flags: dict[str, str] = {}
    source = None
    for line in (build / "build.ninja").read_text().splitlines():
        m = re.match(rf"build CMakeFiles/{target}\.dir/\S+\.o: CXX_COMPILER__{target}_\w+ (\S+)", line)
        if m:
            source = m.group(1)
            flags[source] = ""
        elif source and line.startswith(("  FLAGS = ", "  DEFINES = ")):
            flags[source] += line
        elif not line.startswith("  "):
            source = None
    return flags


def test_the_units_of_both_libraries_are_the_cross_compiled_ones_and_none_uses_aten(configured):
    proc, build = configured
    assert proc.returncode == 0, proc.stdout + proc.stderr
    flags = compile_flags(build, "_C")
    stable = compile_flags(build, "fedkernels_ops")
    assert sorted([*flags, *stable]) == sorted(str(src) for src in cross.sources())
    assert not any("cmake_pch.hxx" in line for line in stable.values())
    wrong_stable = [
        s for s, line in stable.items() if cross.uses_torch(Path(s)) or "-DTORCH_TARGET_VERSION=" not in line
    ]
    assert not wrong_stable, wrong_stable
    # no unit of the build includes ATen any more (the families are on the stable ABI, _C is pybind11 only),
    # so none loads a precompiled torch header, here or in the aarch64 check
    assert not any(cross.uses_torch(src) for src in cross.sources())
    assert not any("cmake_pch.hxx" in line for line in flags.values())
