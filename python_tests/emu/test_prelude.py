"""The emulator's forced include parses every torch header a kernel source uses before it defines the
CUDA macros (``__CUDACC__``, ``__CUDA_ARCH__``): a torch header first included after them would be
compiled with its device branches, which the host compiler cannot build."""

from __future__ import annotations

import re

from python_tests.support.paths import ROOT

TORCH_INCLUDE = re.compile(r"^#include <((?:ATen|c10|torch)/[^>]+)>", re.MULTILINE)


def torch_includes(text: str) -> set[str]:
    return set(TORCH_INCLUDE.findall(text))


def test_every_torch_header_of_csrc_is_in_the_prelude_or_has_a_stand_in() -> None:
    prelude_text = (ROOT / "emu" / "runtime" / "prelude.h").read_text()
    prelude = torch_includes(prelude_text.split("#define __CUDACC__")[0])
    stand_ins = {
        str(p.relative_to(ROOT / "emu" / "runtime" / "include")) for p in (ROOT / "emu/runtime/include").rglob("*.h")
    }
    sources = [p for p in (ROOT / "csrc").rglob("*") if p.suffix in {".h", ".cuh", ".cu", ".cpp"}]
    used = {h: p.relative_to(ROOT) for p in sources for h in torch_includes(p.read_text())}
    missing = {h: str(p) for h, p in used.items() if h not in prelude and h not in stand_ins}
    assert not missing, f"add these to emu/runtime/prelude.h (before the CUDA macros): {missing}"


def test_the_check_sees_a_header_missing_from_the_prelude() -> None:
    assert torch_includes("#include <ATen/ops/sort.h>\n#include <vector>\n") == {"ATen/ops/sort.h"}
