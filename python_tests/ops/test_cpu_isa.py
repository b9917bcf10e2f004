"""The CPU dispatch level (csrc/common/cpu_isa.h): FK_CPU_ISA read once at import, what `fedkernels info`
reports, the test-only limit, and the source rules that keep every x86 intrinsic in a guarded,
dispatched file (so csrc/ builds for aarch64, .ci/run's cross-compile step)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedkernels
from fedkernels import _C
from fedkernels._info import build_info, cpu_isa_line
from python_tests.support.cpu_levels import LEVELS, at_level, process_level, why_not
from python_tests.support.helpers import child_pythonpath
from python_tests.support.paths import ROOT

pytestmark = pytest.mark.cpu_path("the CPU dispatch level; no CUDA kernel")

CSRC = ROOT / "csrc"


def test_build_info_reports_a_level_within_the_host():
    info = build_info()
    assert info["cpu_isa"] in LEVELS and info["cpu_isa_host"] in LEVELS
    assert LEVELS.index(info["cpu_isa"]) <= LEVELS.index(info["cpu_isa_host"])
    assert isinstance(info["cpu_isa_cap"], str)
    assert f"CPU kernels: {info['cpu_isa']} (host supports {info['cpu_isa_host']}" in fedkernels.info()


def test_info_line_says_which_level_ran_when_capped_above_the_host():
    line = cpu_isa_line({"cpu_isa": "avx2", "cpu_isa_host": "avx2", "cpu_isa_cap": "avx512"})
    assert line == "avx2 (host supports avx2; FK_CPU_ISA=avx512 is above the host: its avx2 runs)"
    assert cpu_isa_line({"cpu_isa": "generic", "cpu_isa_host": "avx2", "cpu_isa_cap": "Generic"}).endswith(
        "FK_CPU_ISA=Generic)"
    )
    assert cpu_isa_line({"cpu_isa": "avx2", "cpu_isa_host": "avx2", "cpu_isa_cap": ""}).endswith("FK_CPU_ISA unset)")


def test_limit_lowers_and_restores_the_level():
    top = process_level()
    with at_level("generic"):
        assert build_info()["cpu_isa"] == "generic"
    assert build_info()["cpu_isa"] == top
    assert _C._set_cpu_isa_limit("avx512") == top  # a limit never lifts the level above the process's
    _C._set_cpu_isa_limit(None)
    with pytest.raises(ValueError, match="level must be"):
        _C._set_cpu_isa_limit("sse9")


def test_level_above_the_process_is_skipped_with_its_reason():
    for level in LEVELS:
        reason = why_not(level)
        if LEVELS.index(level) <= LEVELS.index(process_level()):
            assert reason is None
        else:
            assert reason is not None and level in reason


def _child(env_value: str, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, FK_CPU_ISA=env_value, PYTHONPATH=child_pythonpath())
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_env_cap_is_read_at_import_case_and_space_insensitive():
    code = "import fedkernels; print(fedkernels._info.build_info()['cpu_isa']); print(fedkernels.info())"
    r = _child(" Generic ", code)
    assert r.returncode == 0, r.stderr
    level, *info = r.stdout.splitlines()
    assert level == "generic"
    line = next(x for x in info if x.startswith("CPU kernels: "))
    assert line.startswith("CPU kernels: generic (host supports") and "FK_CPU_ISA= Generic " in line


def test_unknown_env_value_fails_the_import_naming_it():
    r = _child("avx-2", "import fedkernels")
    assert r.returncode != 0
    assert "ImportError: FK_CPU_ISA='avx-2' is not a CPU level: use avx512, avx2 or generic" in r.stderr


# ---- source rules ------------------------------------------------------------------------------

INTRINSIC = re.compile(r"#\s*include\s*<\w*intrin\.h>|\b_mm\d*_\w+|\b__m(?:128|256|512)[di]?\b|\b_MM_\w+")
LEVEL_FILE = re.compile(r"_(avx2|avx512)\.cpp$")  # runtime-dispatched through cpu_isa()
X86_HEADER = re.compile(r"_x86\.h$")  # x86-64 baseline (SSE2) forms, compile-time guarded
GUARD = re.compile(r"#\s*if\s+(FK_X86_LEVELS|.*defined\(__x86_64__\)|.*defined\(__SSE2__\))")


def source_rule_violations(path: str, text: str) -> list[str]:
    """Why ``text`` (the file at ``path``, relative to the repository) breaks the ISA source rules."""
    out = []
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if INTRINSIC.search(line.split("//")[0])), None)
    if first is not None:
        if not (LEVEL_FILE.search(path) or X86_HEADER.search(path)):
            out.append(f"{path}:{first + 1}: x86 intrinsic outside a *_avx2.cpp / *_avx512.cpp / *_x86.h file")
        elif not any(GUARD.search(line) for line in lines[:first]):
            out.append(f"{path}:{first + 1}: x86 intrinsic before a guard (#if FK_X86_LEVELS / __x86_64__ / __SSE2__)")
    for i, line in enumerate(lines):
        code = line.split("//")[0]
        if "target_clones" in code:
            out.append(f"{path}:{i + 1}: target_clones dispatches behind cpu_isa()'s back")
        if "__builtin_cpu_supports" in code and not path.endswith("common/cpu_isa.cpp"):
            out.append(f"{path}:{i + 1}: CPU feature test outside csrc/common/cpu_isa.cpp")
        if re.search(r"__attribute__\s*\(\(\s*target\s*\(", code) and not path.endswith("common/cpu_isa.h"):
            out.append(f"{path}:{i + 1}: raw target attribute: use FK_TARGET_AVX2 / _AVX512 under FK_X86_LEVELS")
    return out


def _sources() -> list[Path]:
    return sorted(p for ext in ("*.h", "*.cpp", "*.cu", "*.cuh") for p in CSRC.rglob(ext))  # the emulator lives in emu/


def test_x86_intrinsics_only_in_guarded_dispatched_files():
    problems = [v for p in _sources() for v in source_rule_violations(str(p.relative_to(ROOT)), p.read_text())]
    assert not problems, "\n".join(problems)


def test_source_rules_catch_each_kind_of_violation():
    assert source_rule_violations("csrc/x/a_cpu.cpp", "#include <immintrin.h>\n")
    assert source_rule_violations("csrc/x/a_cpu.cpp", "x = _mm256_add_ps(a, b);\n")
    assert source_rule_violations("csrc/x/a_avx2.cpp", "#include <immintrin.h>\n")  # unguarded
    assert not source_rule_violations("csrc/x/a_avx2.cpp", "#if FK_X86_LEVELS\n#include <immintrin.h>\n#endif\n")
    assert not source_rule_violations("csrc/x/a_x86.h", "#if defined(__SSE2__)\n__m128 v;\n#endif\n")
    assert source_rule_violations("csrc/x/a.cpp", '__attribute__((target_clones("avx2", "default"))) void f();\n')
    assert source_rule_violations("csrc/x/a.cpp", 'static bool b = __builtin_cpu_supports("avx2");\n')
    assert source_rule_violations("csrc/x/a.cpp", '__attribute__((target("avx2"))) void f();\n')
    # a level file too: its level's feature list is spelled once, in cpu_isa.h
    assert source_rule_violations("csrc/x/a_avx512.cpp", '__attribute__((target("avx512f"))) void f();\n')


def _isa_features(level: str) -> set[str]:
    """The features FK_TARGET_<LEVEL> enables, from cpu_isa.h's FK_ISA_FEATURES_* (which may nest)."""
    text = (CSRC / "common" / "cpu_isa.h").read_text()
    defs = dict(re.findall(r"#define (FK_ISA_FEATURES_\w+) (.+)", text))

    def expand(name: str) -> str:
        return "".join(expand(tok) if tok in defs else tok.strip('"') for tok in defs[name].split())

    return set(expand(f"FK_ISA_FEATURES_{level.upper()}").split(","))


def test_each_level_target_enables_what_its_host_check_tests():
    # FK_TARGET_<LEVEL> must enable exactly the features cpu_isa_host() requires for that level
    checks = (CSRC / "common" / "cpu_isa.cpp").read_text()
    required = {}
    for level in ("avx2", "avx512"):
        line = next(x for x in checks.splitlines() if re.match(rf"\s*const bool {level} =", x))
        below = {f for lower in required if re.search(rf"\b{lower}\s*&&", line) for f in required[lower]}
        required[level] = below | set(re.findall(r'__builtin_cpu_supports\("(\w+)"\)', line))
        assert _isa_features(level) == required[level], level
    assert "FK_TARGET_AVX2 __attribute__((target(FK_ISA_FEATURES_AVX2)))" in (CSRC / "common" / "cpu_isa.h").read_text()


def test_the_emulator_is_the_x86_64_only_exception():
    # emu/runtime switches fiber stacks in x86-64 assembly; it is a test tool, and says so on other targets
    runtime = (ROOT / "emu" / "runtime" / "runtime.cpp").read_text()
    assert "#error" in runtime and "__x86_64__" in runtime
