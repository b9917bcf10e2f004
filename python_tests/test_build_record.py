"""The build record cmake/build_info_json.cmake writes beside _C, rendered with ``cmake -P`` for a CPU
and a CUDA configuration (no compiler or GPU needed): valid JSON with every key `fedkernels info`
reads, and the CUDA facts from the variables the CUDA build sets. That a real build's record equals
its module's build_info() is python_tests/experiments/test_info_without_torch.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fedkernels import _build_facts
from python_tests.support.paths import ROOT

CMAKE = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")
pytestmark = pytest.mark.skipif(CMAKE is None, reason="needs cmake")

DRIVER = """
include("{module}")
fk_build_info_json(json)
message(NOTICE "${{json}}")
"""


def render(tmp_path: Path, **variables: str) -> dict:
    """The record's text for these CMake variables, parsed (the module's file name stays a generator expression)."""
    driver = tmp_path / "render.cmake"
    driver.write_text(DRIVER.format(module=(ROOT / "cmake" / "build_info_json.cmake").as_posix()))
    defines = [f"-D{k}={v}" for k, v in variables.items()]
    got = subprocess.run([CMAKE, *defines, "-P", str(driver)], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(got.stderr)


BASE = {
    "PROJECT_VERSION": "0.1.0",
    "FK_TORCH_VERSION": "2.13.0+cu130",
    "CMAKE_SYSTEM_PROCESSOR": "x86_64",
    "CMAKE_CXX_COMPILER_ID": "GNU",
    "CMAKE_CXX_COMPILER_VERSION": "12.2.0",
    "FK_ARCHS": "8.0 9.0",
    "CMAKE_CUDA_COMPILER_ID": "NVIDIA",
    "CMAKE_CUDA_COMPILER_VERSION": "13.0.48",
}


def test_a_cuda_build_records_its_archs_and_nvcc(tmp_path):
    record = render(tmp_path, FK_WITH_CUDA="ON", **BASE)
    assert record == {
        "module": "$<TARGET_FILE_NAME:_C>",
        "version": "0.1.0",
        "torch_version": "2.13.0+cu130",
        "cuda_kernels": True,
        "cuda_archs": "8.0 9.0",
        "cpu_levels": ["generic", "avx2", "avx512"],
        "compiler": "GNU 12.2.0",
        "cuda_compiler": "NVIDIA 13.0.48",
    }
    assert set(_build_facts.BUILD_KEYS) | {"module"} == set(record)


def test_a_cpu_build_records_no_cuda_and_a_non_x86_build_only_generic(tmp_path):
    record = render(tmp_path, FK_WITH_CUDA="OFF", **{**BASE, "CMAKE_SYSTEM_PROCESSOR": "aarch64"})
    assert record["cuda_kernels"] is False and record["cuda_archs"] == "" and record["cuda_compiler"] == ""
    assert record["cpu_levels"] == ["generic"]


def test_values_are_escaped(tmp_path):
    record = render(tmp_path, FK_WITH_CUDA="OFF", **{**BASE, "FK_TORCH_VERSION": 'a"b\\c'})
    assert record["torch_version"] == 'a"b\\c'
