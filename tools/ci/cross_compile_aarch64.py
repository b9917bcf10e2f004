"""Compile every CPU translation unit of csrc/ for aarch64 Linux with a cross compiler (CI step 1d).

    python tools/ci/cross_compile_aarch64.py [--install] [--cxx aarch64-linux-gnu-g++] [--jobs 2]

A compile-only check: each csrc/**/*.cpp of the _C module (the CUDA emulator, emu/, is an
x86-64-only test tool outside csrc/) is compiled to an aarch64 object against the torch, pybind11
and Python headers of the interpreter running this script, with the module's own flags; nothing is
linked or run (there is no aarch64 torch library here to link against, and no aarch64 machine to run
on). It proves the sources build for ARM: every x86 intrinsic sits behind a guard
(python_tests/ops/test_cpu_isa.py checks the rule), and the portable paths compile (GCC's vector types
become NEON there). The objects are checked to be aarch64 ELF. Compiled at -O1: code generation runs
(so target errors show) at a fraction of -O2's time. The torch headers are the x86-64
wheel's: C++ headers are the same for both targets except a few generated config values, which is
fine for a compile check, not for a build.

--install gets Debian's cross compiler (apt-get install g++-aarch64-linux-gnu, through sudo when not
root) when it is missing, and stops with exit status 2 and the reason if it cannot; with
--skip-missing too (what CI runs) a failed install prints SKIPPED and the reason and exits 0, so a
machine without Debian's registry skips the check instead of failing CI on a missing tool. The torch headers
are parsed once into a precompiled header, so the whole check costs about a parse of torch plus the
sources.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "g++-aarch64-linux-gnu"
EM_AARCH64 = 183  # ELF e_machine of aarch64 objects
# The torch headers most translation units include, parsed once into a precompiled header.
PCH_HEADERS = ["ATen/core/Tensor.h", "ATen/Parallel.h", "torch/library.h"]


class InstallError(RuntimeError):
    """The cross compiler could not be installed; the message says why."""


# apt-get's own steps, each bounded: a registry that does not answer must not stall CI.
APT_TIMEOUT_S = 300


def install_compiler(cxx: str) -> str:
    """Install Debian's aarch64 cross compiler; the compiler's path, or InstallError saying why not."""
    apt = shutil.which("apt-get")
    if apt is None:
        raise InstallError(f"{cxx} is not installed and there is no apt-get here to install {PACKAGE}")
    prefix: list[str] = []
    if os.geteuid() != 0:
        sudo = shutil.which("sudo")
        if sudo is None:
            raise InstallError(f"{cxx} is not installed; installing {PACKAGE} needs root (no sudo here)")
        prefix = [sudo, "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"cross-compile: installing {PACKAGE} (apt-get)", flush=True)
    for cmd in (["update", "-q"], ["install", "-y", "-q", "-o", "DPkg::Lock::Timeout=120", PACKAGE]):
        step = " ".join(cmd)
        try:
            r = subprocess.run([*prefix, apt, *cmd], env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise InstallError(f"apt-get {step} did not finish in {APT_TIMEOUT_S} s; {PACKAGE} not installed") from None
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-10:])
            raise InstallError(f"apt-get {step} failed (status {r.returncode}); {PACKAGE} not installed:\n{tail}")
    path = shutil.which(cxx)
    if path is None:
        raise InstallError(f"{PACKAGE} installed but {cxx} is still not on PATH")
    return path


def sources() -> list[Path]:
    """The CPU translation units of _C and libfedkernels_ops (CMakeLists.txt's glob; the CUDA launchers,
    *_cuda.cpp, are not)."""
    units = sorted(ROOT.glob("csrc/*.cpp")) + sorted(ROOT.glob("csrc/*/*.cpp"))
    return [p for p in units if not p.name.endswith("_cuda.cpp")]


INCLUDE = re.compile(r'#\s*include\s*[<"]([^>"]+)[>"]')


# cmake/stable_ops.cmake's floor
TORCH_TARGET_VERSION = re.search(
    r'set\(FK_TORCH_TARGET_VERSION "(0x[0-9a-f]+)"\)', (ROOT / "cmake" / "stable_ops.cmake").read_text()
).group(1)  # type: ignore[union-attr]
STABLE_HEADERS = ("torch/csrc/stable/", "torch/headeronly/", "torch/csrc/inductor/aoti_torch/c/")


def torch_headers(src: Path, seen: set[Path] | None = None) -> set[str]:
    """The torch headers src includes, itself or through csrc/ headers."""
    seen = set() if seen is None else seen
    if src in seen:
        return set()
    seen.add(src)
    found: set[str] = set()
    for name in INCLUDE.findall(src.read_text()):
        if name.startswith(("ATen/", "torch/", "c10/")):
            found.add(name)
        header = ROOT / "csrc" / name
        if header.is_file():
            found |= torch_headers(header, seen)
    return found


def uses_torch(src: Path) -> bool:
    """Whether src includes an ATen header or torch's non-stable ones, itself or through csrc/ headers: only
    those units load the precompiled torch headers (loading them costs a unit that needs none more than its
    own compile; c10's small headers alone, such as Half.h, are not worth it)."""
    return any(h.startswith(("ATen/", "torch/")) and not h.startswith(STABLE_HEADERS) for h in torch_headers(src))


def is_stable_unit(src: Path) -> bool:
    """A unit of libfedkernels_ops (the stable ABI): built, as CMake builds it, with TORCH_TARGET_VERSION."""
    headers = torch_headers(src)
    return bool(headers) and all(h.startswith(STABLE_HEADERS) for h in headers)


def compile_flags() -> list[str]:
    """The module's compile flags (CMakeLists.txt) with this interpreter's torch, pybind11 and Python headers."""
    import pybind11
    import torch
    from torch.utils.cpp_extension import include_paths

    abi = int(torch.compiled_with_cxx11_abi())
    # -O1: code is generated (vector types lowered to NEON, always_inline honoured) at a fraction of
    # -O2's time; this is a check that the sources build, not a build of the library.
    flags = ["-std=gnu++20", "-O1", "-fPIC", "-fopenmp", "-ffp-contract=off", "-Wall", "-Wno-unused-parameter"]
    flags += [f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DTORCH_ASSERT_ONLY_METHOD_OPERATORS", "-DTORCH_EXTENSION_NAME=_C"]
    flags += ['-DFK_VERSION="cross"']
    flags += [f'-DFK_TORCH_VERSION="{torch.__version__}"', '-DFK_CUDA_ARCHS=""']
    flags += ['-DFK_COMPILER="cross"', '-DFK_CUDA_COMPILER=""']  # cmake/build_info.cmake's, for ops.cpp
    flags += [f"-I{ROOT / 'csrc'}"]
    for inc in [*include_paths(), pybind11.get_include(), sysconfig.get_paths()["include"]]:
        flags += ["-isystem", inc]
    return flags


def run(cmd: list[str]) -> tuple[int, str, float]:
    """Run a compiler: (status, its output, the CPU seconds it used)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out.strip(), usage.ru_utime + usage.ru_stime


def is_aarch64_object(path: Path) -> bool:
    head = path.read_bytes()[:20]
    return head[:4] == b"\x7fELF" and int.from_bytes(head[18:20], "little") == EM_AARCH64


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cxx", default="aarch64-linux-gnu-g++", help="the cross compiler (default: Debian's)")
    ap.add_argument("--install", action="store_true", help=f"apt-get install {PACKAGE} if the compiler is missing")
    ap.add_argument(
        "--skip-missing",
        action="store_true",
        help="exit 0 with a printed reason when the compiler is missing (with --install: when it cannot be installed)",
    )
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compilers run at once")
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "aarch64", help="objects and the precompiled header")
    ap.add_argument("--no-pch", action="store_true", help="parse the torch headers in every unit (to time the saving)")
    args = ap.parse_args(argv)

    cxx = shutil.which(args.cxx)
    if cxx is None:
        if args.skip_missing and not args.install:
            print(f"cross-compile: SKIPPED: {args.cxx} is not installed here (Debian: apt-get install {PACKAGE})")
            return 0
        if not args.install:
            print(f"error: {args.cxx} not found (Debian: apt-get install {PACKAGE}, or pass --install)")
            return 2
        try:
            cxx = install_compiler(args.cxx)
        except InstallError as e:
            if args.skip_missing:
                print(f"cross-compile: SKIPPED: {e}")
                return 0
            print(f"error: {e}")
            return 2
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    start = time.perf_counter()
    flags = compile_flags()
    args.out.mkdir(parents=True, exist_ok=True)
    pch = args.out / "fk_pch.h"
    use_pch: list[str] = []
    if not args.no_pch and any(uses_torch(src) for src in sources()):
        pch.write_text("".join(f"#include <{h}>\n" for h in PCH_HEADERS))
        code, log, secs = run([cxx, *flags, "-x", "c++-header", str(pch), "-o", str(pch) + ".gch"])
        if code != 0:
            print(f"error: the precompiled header (torch headers) does not compile for aarch64:\n{log}")
            return 1
        use_pch = ["-Winvalid-pch", "-include", str(pch)]
        print(f"cross-compile: {version}; torch headers precompiled ({secs:.1f} s of CPU)", flush=True)

    def one(src: Path) -> tuple[Path, int, str, float]:
        obj = args.out / (str(src.relative_to(ROOT / "csrc")).replace("/", "__") + ".o")
        pch_flags = use_pch if uses_torch(src) else []
        stable = [f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}"] if is_stable_unit(src) else []
        code, log, secs = run([cxx, *flags, *pch_flags, *stable, "-c", str(src), "-o", str(obj)])
        if code == 0 and not is_aarch64_object(obj):
            code, log = 1, f"{obj} is not an aarch64 ELF object"
        return src, code, log, secs

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, sources()))
    failed = [r for r in results if r[1] != 0]
    for src, code, log, secs in results:
        status = "ok" if code == 0 else "FAILED"
        print(f"  {status:6} {secs:5.1f} s of CPU  {src.relative_to(ROOT)}" + (f"\n{log}" if log else ""))
    total = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"cross-compile: {len(results) - len(failed)} of {len(results)} CPU translation units compiled for aarch64 "
        f"in {total:.0f} s ({usage.ru_utime + usage.ru_stime:.0f} s of CPU; compile only: not linked, not run)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
