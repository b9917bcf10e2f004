"""``fedkernels info`` answers without importing torch, from the build record beside the compiled module
(cmake/build_info.cmake) and this CPU, and says what the loaded module itself reports
(``fedkernels info --runtime``, ``fedkernels._info.build_info()``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels import _build_facts as bf
from fedkernels.fl.registry import strategies
from fedkernels_cli import main
from fedkernels_cli.algorithms import algorithm_names
from fedkernels_cli.standalone import compiled_module
from python_tests.support.helpers import child_pythonpath

# `fedkernels info` (or any argv) in a fresh process: its output, exit status and the heavy modules it imported
PROBE = """
import contextlib, io, json, sys
from fedkernels_cli.main import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "fedkernels", "numpy") if m in sys.modules)
print(json.dumps({"out": out.getvalue(), "code": code, "imported": heavy}))
"""

# the torch-free facts in a fresh process, and whether torch was imported for them
FACTS = """
import json, sys
from fedkernels_cli.info import build_facts
print(json.dumps({"facts": build_facts(), "torch": "torch" in sys.modules}))
"""

# the loaded module's own report, in a fresh process (FK_CPU_ISA is read once, at import)
MODULE = "import json, fedkernels; print(json.dumps(fedkernels._info.build_info()))"


def child(code: str, *argv: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter with ``env`` added; its last stdout line, as JSON."""
    full = dict(os.environ, PYTHONPATH=child_pythonpath(), **env)
    got = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=full, timeout=180, check=False
    )
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


def test_the_build_record_sits_beside_the_module():
    module = compiled_module()
    assert module is not None and Path(module).samefile(fedkernels._C.__file__)
    assert bf.read_record(module) is not None, (
        f"no {bf.RECORD} for {module.name} beside it: the build writes it (tools/dev/build_inplace.py, make install); "
        "a copied _C needs its record copied too"
    )


def test_info_imports_no_torch_and_prints_what_the_runtime_path_prints(tmp_path, capsys, monkeypatch):
    fast = child(PROBE, "info", FEDKERNELS_DATA_DIR=str(tmp_path))
    assert fast["code"] == 0 and fast["imported"] == [], fast
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(tmp_path))
    assert main(["info", "--runtime"]) == 0
    runtime = capsys.readouterr().out.splitlines()
    lines = fast["out"].splitlines()
    assert len(lines) == len(runtime), (lines, runtime)
    for got, want in zip(lines, runtime, strict=True):
        if got.startswith(("GPU available: ", "threads: ")):
            assert got.endswith(bf.NOT_CHECKED), got
        elif got.startswith("built against torch "):
            assert want.startswith(got + " (running torch "), (got, want)
        else:
            assert got == want
    assert lines[-1].startswith("algorithms: FedAvg, ")


@pytest.mark.parametrize("cap", ["", " Generic ", "AVX2", "avx512"])
def test_facts_equal_the_loaded_modules(cap):
    env = {"FK_CPU_ISA": cap}
    fast = child(FACTS, **env)
    assert fast["torch"] is False
    facts = fast["facts"]
    assert facts is not None and facts.pop("cpu_isa_error") is None
    module = child(MODULE, **env)
    assert facts == {key: module[key] for key in facts}, (facts, module)


def test_an_unknown_cap_is_the_import_error_the_module_raises():
    facts = child(FACTS, FK_CPU_ISA="avx-2")["facts"]
    assert facts["cpu_isa"] is None
    assert facts["cpu_isa_error"].startswith("FK_CPU_ISA='avx-2' is not a CPU level: use avx512, avx2 or generic")
    full = dict(os.environ, PYTHONPATH=child_pythonpath(), FK_CPU_ISA="avx-2")
    got = subprocess.run(
        [sys.executable, "-c", "import fedkernels"], capture_output=True, text=True, env=full, timeout=180
    )
    assert f"ImportError: {facts['cpu_isa_error']}" in got.stderr


def test_algorithm_names_from_source_are_the_registry():
    assert algorithm_names() == [cls.name for cls in strategies().values()]


def test_without_a_record_info_asks_the_module(tmp_path, capsys, monkeypatch):
    import fedkernels_cli.info as cli_info

    monkeypatch.setattr(cli_info, "compiled_module", lambda: tmp_path / "_C.so")  # a module with no record
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(tmp_path))
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"(no build record beside {tmp_path / '_C.so'}: asking the module, which loads torch)" in out
    assert "running torch" in out and "GPU available: " + bf.NOT_CHECKED not in out


# ---- the record and the level rules, without a build --------------------------------------------------

RECORD = {
    "module": "_C.abi3.so",
    "version": "0.1.0",
    "torch_version": "2.13.0+cu130",
    "cuda_kernels": True,
    "cuda_archs": "8.0 9.0",
    "cpu_levels": ["generic", "avx2", "avx512"],
    "compiler": "GNU 12.2.0",
    "cuda_compiler": "NVIDIA 13.0.48",
}


def test_a_record_of_another_module_or_incomplete_is_not_read(tmp_path):
    (tmp_path / bf.RECORD).write_text(json.dumps(RECORD))
    assert bf.read_record(tmp_path / "_C.abi3.so") == RECORD
    assert bf.read_record(tmp_path / "_C.cpython-311-x86_64-linux-gnu.so") is None  # another build's record
    (tmp_path / bf.RECORD).write_text(json.dumps({k: v for k, v in RECORD.items() if k != "compiler"}))
    assert bf.read_record(tmp_path / "_C.abi3.so") is None
    (tmp_path / bf.RECORD).write_text("{not json")
    assert bf.read_record(tmp_path / "_C.abi3.so") is None


def test_a_cuda_record_is_summarised_with_its_archs_and_compiler():
    lines = bf.summary(bf.facts(RECORD, {}, "flags\t\t: fpu sse2 avx2 fma f16c\n"))
    assert "CUDA kernels: yes, archs 8.0 9.0 (NVIDIA 13.0.48)" in lines
    assert "CPU kernels: avx2 (host supports avx2; FK_CPU_ISA unset)" in lines
    assert "compiled by GNU 12.2.0; CPU levels generic, avx2, avx512" in lines
    assert f"GPU available: {bf.NOT_CHECKED}" in lines


def test_host_level_needs_every_flag_of_a_level_and_a_non_x86_build_is_generic():
    flags = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma f16c avx512f\n"
    assert bf.host_level(["generic", "avx2", "avx512"], flags) == "avx2"  # avx512vl missing
    assert bf.host_level(["generic", "avx2", "avx512"], flags + "flags: avx512vl\n") == "avx2"  # first CPU only
    assert bf.host_level(["generic", "avx2", "avx512"], flags.replace("f16c", "")) == "generic"
    assert bf.host_level(["generic"], None) == "generic"
    assert bf.host_level(["generic", "avx2", "avx512"], None) is None


SPACE = st.text(alphabet=" \t\n\v\f\r", max_size=3)


@given(host=st.sampled_from(bf.LEVELS), cap=st.sampled_from(bf.LEVELS), pre=SPACE, post=SPACE, upper=st.booleans())
def test_the_level_is_the_lower_of_host_and_cap_spaces_and_case_ignored(host, cap, pre, post, upper):
    text = pre + (cap.upper() if upper else cap) + post
    level, error = bf.level_in_use(host, text)
    assert error is None
    assert level == min(host, cap, key=bf.LEVELS.index)
    assert bf.level_in_use(host, "") == (host, None)


@given(cap=st.text(min_size=1, max_size=8))
def test_an_unknown_cap_is_an_error_naming_it(cap):
    level, error = bf.level_in_use("avx2", cap)
    if "".join(ch for ch in cap if ch not in " \t\n\v\f\r").lower() in (*bf.LEVELS, ""):
        assert error is None
    else:
        assert level is None and error is not None and f"FK_CPU_ISA='{cap}'" in error
