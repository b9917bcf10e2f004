"""The op families on the LibTorch stable ABI (cmake/stable_ops.cmake): built into libfedkernels_ops.so,
which must call torch only through its C shim, so one build loads on every torch from the floor on.

Two guards: the built library's undefined symbols (`nm -D`, as kvcached checks its wheels) are the
shim's C functions and the C/C++ runtime's, never a C++ symbol of at::, c10:: or torch::; and the
families' sources reach no ATen or c10 header (the build's TORCH_TARGET_VERSION makes most of them an
#error too; this names the file that includes one)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fedkernels import _C
from python_tests.support.paths import ROOT
from python_tests.test_cuda_sources import torch_headers_reached

CSRC = ROOT / "csrc"
STABLE_HEADERS = ("torch/csrc/stable/", "torch/headeronly/", "torch/csrc/inductor/aoti_torch/c/")
# The emulator's branch of common/stable/cuda.h includes its stand-in (emu/runtime/include), not c10.
EMULATOR_STAND_INS = frozenset({("csrc/common/stable/cuda.h", "c10/cuda/CUDAException.h")})

# An undefined symbol the library may import: the shim (aoti_torch_*, torch_*), and the runtime the
# compiler links (versioned glibc / libstdc++ / libgcc / libgomp symbols; std:: templates bound to
# torch's copy; the CUDA runtime's C API in CUDA builds; the sanitizers' hooks in the ASan build).
ALLOWED_SYMBOL = re.compile(
    r"^(aoti_torch_\w+|torch_\w+|\w+@(GLIBC|GLIBCXX|CXXABI|GCC|GOMP|OMP)_[\w.]+|_ZN?K?R?O?St\w+|_ZSt\w+"
    r"|\w+@libcudart\.so\.\d+"
    r"|__(asan|ubsan|sanitizer|lsan)_\w+|_ITM_\w+|__gmon_start__|__cxa_finalize)$"
)


def stable_families() -> list[str]:
    text = (ROOT / "cmake" / "stable_ops.cmake").read_text()
    match = re.search(r"set\(FK_STABLE_FAMILIES ([^)]*)\)", text)
    assert match, "cmake/stable_ops.cmake must set FK_STABLE_FAMILIES"
    return match.group(1).split()


def ops_library() -> Path:
    return Path(_C.__file__).with_name("libfedkernels_ops.so")


def test_the_ops_library_imports_only_the_torch_c_shim() -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs binutils' nm to list the library's symbols")
    lib = ops_library()
    assert lib.is_file(), f"{lib} is missing: _C and libfedkernels_ops.so are installed side by side"
    out = subprocess.run([nm, "-D", "--undefined-only", str(lib)], check=True, capture_output=True, text=True)
    names = [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]
    assert any(n.startswith("aoti_torch_") for n in names), "the library should call torch's C shim"
    outside = [n for n in names if not ALLOWED_SYMBOL.match(n)]
    assert not outside, f"libfedkernels_ops.so imports symbols outside the stable ABI: {outside[:20]}"


def headers_reached(source: Path) -> dict[str, str]:
    """Torch headers `source` includes, itself or through csrc/ headers, less the emulator's stand-ins."""
    return torch_headers_reached(source, ignore=EMULATOR_STAND_INS)


def test_stable_families_reach_no_aten_or_c10_header() -> None:
    families = stable_families()
    assert families
    bad = {}
    for family in families:
        # the compiled units, and through them every header they reach
        units = sorted((CSRC / family).glob("*.cpp")) + sorted((CSRC / family).glob("*.cu"))
        assert units, f"no sources in csrc/{family}"
        for unit in units:
            outside = {h: via for h, via in headers_reached(unit).items() if not h.startswith(STABLE_HEADERS)}
            if outside:
                bad[str(unit.relative_to(ROOT))] = outside
    assert not bad, f"a stable-ABI family reaches ATen / c10 headers (use csrc/common/stable/): {bad}"


def test_the_guards_see_what_they_guard() -> None:
    """The symbol rule rejects a C++ symbol of torch, the header rule an ATen include."""
    for sym in ("_ZN2at6native5emptyEv", "_ZN3c1019UndefinedTensorImpl10_singletonE", "_ZNK2at10TensorBase4sizeEl"):
        assert not ALLOWED_SYMBOL.match(sym)
    for sym in (
        "aoti_torch_get_sizes",
        "torch_call_dispatcher",
        "memcpy@GLIBC_2.14",
        "__cxa_throw@CXXABI_1.3",
        "__cudaLaunchKernel@libcudart.so.13",
    ):
        assert ALLOWED_SYMBOL.match(sym)
    assert not "ATen/core/Tensor.h".startswith(STABLE_HEADERS)
