"""cmake/check_cxx_runtime.cmake: the build refuses a module that carries its own C++ runtime.

A module linked with a static libstdc++ throws through a private copy of the runtime; torch catches
through the shared one, and on a GPU image (g++ 13.3 linking libstdc++ statically, system libstdc++
from gcc 14) every op that raised an error segfaulted. The check runs after every link of _C and
_C_emu; here it runs on two tiny modules built both ways, and on the installed _C.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedkernels

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "cmake" / "check_cxx_runtime.cmake"
CMAKE = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")
CXX, NM = shutil.which("g++"), shutil.which("nm")

pytestmark = pytest.mark.skipif(
    not (CMAKE and CXX and NM), reason="needs cmake, g++ and nm (the build's own tools) on PATH"
)

THROWING_SOURCE = """
#include <stdexcept>
#include <string>
extern "C" void fk_fail(int v) { throw std::invalid_argument("v must be >= 0, got " + std::to_string(v)); }
"""


def _check(module: Path) -> subprocess.CompletedProcess[str]:
    cmd = [str(CMAKE), f"-DNM={NM}", f"-DMODULE={module}", f"-DCXX={CXX}", "-P", str(SCRIPT)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _module(tmp_path: Path, name: str, *flags: str) -> Path:
    src = tmp_path / "throwing.cpp"
    src.write_text(THROWING_SOURCE)
    out = tmp_path / f"{name}.so"
    subprocess.run([str(CXX), "-shared", "-fPIC", *flags, str(src), "-o", str(out)], check=True, timeout=120)
    return out


def test_refuses_a_module_with_a_static_cxx_runtime(tmp_path):
    res = _check(_module(tmp_path, "static_runtime", "-static-libstdc++"))
    message = " ".join(res.stderr.split())  # cmake wraps long messages
    assert res.returncode != 0
    assert "__cxa_throw" in message and "links libstdc++ statically" in message
    assert "CXX=/usr/bin/g++" in message


def test_accepts_a_module_on_the_shared_runtime(tmp_path):
    res = _check(_module(tmp_path, "shared_runtime"))
    assert res.returncode == 0, res.stderr


def test_the_installed_extension_passes():
    res = _check(Path(fedkernels._C.__file__))
    assert res.returncode == 0, res.stderr


def test_missing_arguments_are_an_error():
    res = subprocess.run([str(CMAKE), "-P", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "needs -DNM=" in res.stderr
