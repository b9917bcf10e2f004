"""How a CUDA family is split (CMakeLists.txt, docs/developing.md): `<op>_cuda.cu` holds the kernels on raw
pointers and includes no torch header, itself or through csrc/ headers (nvcc parses a unit three times:
cudafe++, cicc and the host compiler, so torch's headers would be most of the CUDA build), and
`<op>_cuda.cpp` holds the ATen launchers and the CUDA registration, built by the host compiler with the
torch precompiled header. Read from the sources: nothing is compiled."""

from __future__ import annotations

import re
from pathlib import Path

from python_tests.support.paths import ROOT

CSRC = ROOT / "csrc"
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
# Device-side half types: their headers are small and have no ATen in them.
ALLOWED_TORCH_HEADERS = {
    "c10/util/Half.h",
    "c10/util/BFloat16.h",
    "torch/headeronly/util/Half.h",
    "torch/headeronly/util/BFloat16.h",
}
TORCH_PREFIXES = ("ATen/", "torch/", "c10/")
REGISTRATION = re.compile(r"TORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(")


def torch_headers_reached(source: Path, ignore: frozenset[tuple[str, str]] = frozenset()) -> dict[str, str]:
    """Torch headers `source` includes, itself or through csrc/ headers: {header: the csrc file that includes it}.
    `ignore` holds (file, header) includes not to count (an emulator stand-in, say)."""
    found: dict[str, str] = {}
    todo, seen = [source], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        for name in INCLUDE.findall(path.read_text()):
            if name.startswith(TORCH_PREFIXES) and (rel, name) not in ignore:
                found.setdefault(name, rel)
            elif (CSRC / name).is_file():
                todo.append(CSRC / name)
    return found


def kernel_units() -> list[Path]:
    return sorted(CSRC.glob("*/*.cu"))


def test_kernel_units_include_no_torch_header() -> None:
    assert kernel_units()
    bad = {
        str(unit.relative_to(ROOT)): {
            h: via for h, via in torch_headers_reached(unit).items() if h not in ALLOWED_TORCH_HEADERS
        }
        for unit in kernel_units()
    }
    bad = {unit: headers for unit, headers in bad.items() if headers}
    assert not bad, f"move the ATen side of these into the family's _cuda.cpp: {bad}"


def test_cuda_registrations_are_in_the_launcher_units() -> None:
    in_kernels = [str(p.relative_to(ROOT)) for p in kernel_units() if REGISTRATION.search(p.read_text())]
    assert not in_kernels, f"register in the _cuda.cpp launcher unit, not in the kernels: {in_kernels}"
    launchers = sorted(CSRC.glob("*/*_cuda.cpp"))
    assert launchers
    unregistered = [
        str(p.relative_to(ROOT)) for p in launchers if "TORCH_LIBRARY_IMPL(fedkernels, CUDA" not in p.read_text()
    ]
    assert not unregistered, unregistered
    cpu_side = [
        str(p.relative_to(ROOT))
        for p in CSRC.rglob("*.cpp")
        if not p.name.endswith("_cuda.cpp") and "TORCH_LIBRARY_IMPL(fedkernels, CUDA" in p.read_text()
    ]
    assert not cpu_side, f"a CPU unit registers a CUDA kernel (CPU builds would then hold one): {cpu_side}"


def test_the_include_walk_sees_a_header_included_through_csrc(tmp_path: Path) -> None:
    unit = tmp_path / "x_cuda.cu"
    unit.write_text('#include "prox/prox_checks.h"\n#include <cstdint>\n')
    reached = torch_headers_reached(unit)
    assert any(h.startswith("torch/") for h in reached)
    assert str(unit) not in set(reached.values())
    assert all(via.startswith("csrc/") for via in reached.values())
