"""``make bench`` (tools/dev/bench_all.py): every bench script has a quick run, and no bench script writes the
committed tables in bench/results unless its ``--out`` says so. Nothing here runs a benchmark: the list
comes from ``bench_all.py --list`` and the output paths from the scripts' code and bench/common.py."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT

BENCH = ROOT / "bench"
SCRIPTS = {p.stem: p for p in sorted(BENCH.glob("*/*.py")) if p.stem != "__init__"}  # bench/ops, bench/fl
QUICK_OUT = ROOT / "build" / "bench-results"
READERS = {"common", "fl_report", "fl_plots", "paper_tables"}  # common defines the paths; these read bench/results
# (fl_plots writes its PNGs only beside its --out)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench_all = _load("fk_bench_all", ROOT / "tools" / "dev" / "bench_all.py")


def _listed() -> dict[str, list[str]]:
    """script name -> its arguments, from ``bench_all.py --list`` (the env var makes gpu_model listed too)."""
    env = {**os.environ, "FK_CUDA_EMU_MODULE": "unused-by-list"}
    res = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "dev" / "bench_all.py"), "--list"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    out = {}
    for line in res.stdout.splitlines():
        if line.startswith("$ "):
            words = line[2:].split()  # python -m bench.<folder>.<name> args...
            assert words[1] == "-m" and words[2].startswith("bench."), line
            out[words[2].rsplit(".", 1)[1]] = words[3:]
    return out


def _benchmarks() -> list[str]:
    return sorted(n for n in SCRIPTS if n not in bench_all.NOT_BENCHMARKS)


def test_every_bench_script_is_listed_with_quick_and_an_out_under_build():
    listed = _listed()
    assert sorted(listed) == _benchmarks()
    for name, args in listed.items():
        assert "--quick" in args, name
        out = Path(args[args.index("--out") + 1])
        assert out == QUICK_OUT / f"{name}.json", name
    assert not hasattr(bench_all, "NO_QUICK_YET")


def _flags(name: str, path: Path | None = None) -> set[str]:
    """The options a bench script's code declares, with those of the bench modules it imports from
    (fl_fedaws_sweep extends fl_fedaws's parser; common.add_device_arguments adds --out)."""
    path = path or SCRIPTS.get(name, BENCH / f"{name}.py")  # common.py sits in bench/
    tree = ast.parse(path.read_text())
    flags = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if fn == "add_argument" and node.args and isinstance(node.args[0], ast.Constant):
                flags.add(node.args[0].value)
            if fn == "add_device_arguments":
                flags.update({"--device", "--out"})
        if isinstance(node, ast.ImportFrom) and node.module:
            imported = ROOT / f"{node.module.replace('.', '/')}.py"  # bench.fl.fl_fedaws -> bench/fl/fl_fedaws.py
            if imported.is_file() and imported != path:
                flags |= _flags(node.module, imported)
    return flags


@pytest.mark.parametrize("name", _benchmarks())
def test_bench_script_declares_quick_and_out(name: str):
    flags = _flags(name)
    assert "--quick" in flags, name
    assert "--out" in flags, name


@pytest.mark.parametrize("name", sorted(n for n in SCRIPTS if n not in READERS))
def test_bench_script_never_names_bench_results(name: str):
    """No script builds a bench/results path itself (``RESULTS`` or ``... / "results"``): its default output
    comes from common.results_path, which never points there."""
    tree = ast.parse(SCRIPTS[name].read_text())
    for node in ast.walk(tree):
        assert not (isinstance(node, ast.Name) and node.id == "RESULTS"), f"{name}: line {node.lineno}"
        assert not (isinstance(node, ast.Attribute) and node.attr == "RESULTS"), f"{name}: line {node.lineno}"
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            assert not (isinstance(right, ast.Constant) and right.value == "results"), f"{name}: line {node.lineno}"


def test_default_output_paths_avoid_bench_results(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    common = _load("fk_bench_common_paths", BENCH / "common.py")
    results = common.RESULTS.resolve()
    for kwargs in ({}, {"quick": True}, {"device": "cuda"}, {"device": "cuda", "quick": True}):
        path = common.results_path("x", **kwargs).resolve()
        assert results not in path.parents, kwargs
    assert common.results_path("x") == common.QUICK_RESULTS / "x.json"
    # an explicit --out still may name bench/results (how the committed tables are made)
    assert common.results_path("x", out=common.RESULTS / "x.json") == common.RESULTS / "x.json"
    monkeypatch.setattr(common, "QUICK_RESULTS", tmp_path)
    path = common.write_results("x", [{"a": 1}])
    assert path == tmp_path / "x.json" and path.is_file()


def _columns_of(script: str) -> list[str]:
    """The ``COLUMNS`` list a bench script defines, read from its code (no import: it needs torch)."""
    for node in ast.parse(SCRIPTS[script].read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COLUMNS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{script}.py defines no COLUMNS")


def test_fl_report_prints_the_columns_fl_fedmlh_wrote(tmp_path, monkeypatch):
    """fl_fedmlh.py writes its column list into its JSON; fl_report.py takes it from there (one list)."""
    import json

    columns = _columns_of("fl_fedmlh")
    committed = json.loads((BENCH / "results" / "fl" / "fl_fedmlh.json").read_text())
    assert committed["columns"] == columns
    report = _load("fk_fl_report", BENCH / "fl" / "fl_report.py")
    header = next(line for line in report.fedmlh().splitlines() if line.startswith("| seed | algorithm |"))
    assert header == "| " + " | ".join(["seed", "algorithm", *columns[2:]]) + " |"
    # a JSON with another list prints that list; one without says to rerun
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    (tmp_path / "fl_fedmlh.json").write_text(json.dumps({**committed, "columns": ["dataset", "algorithm", "P@1"]}))
    assert "| seed | algorithm | P@1 |" in report.fedmlh()
    (tmp_path / "fl_fedmlh.json").write_text(json.dumps({k: v for k, v in committed.items() if k != "columns"}))
    assert "rerun python -m bench.fl.fl_fedmlh" in report.fedmlh()
