"""Every script in examples/ runs as a user would run it (a subprocess, from another folder, with only
fedkernels importable: no test helpers) and prints what it promises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedkernels
from python_tests.support.real_data import dataset

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
BIBTEX = dataset("bibtex")


def run_example(tmp_path: Path, script: str, *args: str, timeout: float = 240) -> str:
    """Run ``examples/<script>`` in ``tmp_path``; PYTHONPATH holds only the folder fedkernels comes from."""
    env = {**os.environ, "PYTHONPATH": str(Path(fedkernels.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_example_is_tested():
    tested = {
        "bibtex_heads.py",
        "compile_ops.py",
        "custom_strategy.py",
        "flower_app/run_local.py",
        "flower_app/fk_example_app.py",
    }
    assert {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.py")} == tested


@pytest.mark.real_data("bibtex")
def test_bibtex_heads(tmp_path):
    out = run_example(tmp_path, "bibtex_heads.py", "--data", str(BIBTEX))
    rows = re.findall(r"head=(\w+)\s+loss ([\d.]+) -> ([\d.]+)\s+test P@1 ([\d.]+)\s+\(label prior P@1 ([\d.]+)\)", out)
    assert [r[0] for r in rows] == ["linear", "fedmlh", "sampled"], out
    for head, first, last, p1, prior in rows:
        assert float(last) < 0.8 * float(first), (head, out)  # the loss went down
        assert float(p1) > float(prior) + 0.2, (head, out)  # far above always guessing the top label
        assert float(p1) > 0.4, (head, out)


def test_bibtex_heads_missing_data_is_a_clear_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(fedkernels.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "bibtex_heads.py"), "--data", str(tmp_path / "none")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "pass --data FOLDER" in done.stderr


def test_compile_ops(tmp_path):
    out = run_example(tmp_path, "compile_ops.py")
    assert out.count("compiled matches eager") == 3 and "DIFFERS" not in out, out
    assert "3/3 compiled graphs match eager" in out
    assert "[1.5, 2.0, -1.0]" in out  # the summed sketch recovers both clients' updates


def test_custom_strategy(tmp_path):
    out = run_example(tmp_path, "custom_strategy.py", "--rounds", "8")
    assert len(re.findall(r"^round \d+: clients \[", out, flags=re.M)) == 8, out
    m = re.search(r"test P@1 ([\d.]+) \(untrained\) -> ([\d.]+) after 8 rounds \(label prior P@1 ([\d.]+)\)", out)
    assert m, out
    untrained, final, prior = map(float, m.groups())
    assert final > prior + 0.2 and final > untrained + 0.3, out


def test_flower_app_on_loopback(tmp_path):
    pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")
    out = run_example(tmp_path, "flower_app/run_local.py", "--rounds", "2", timeout=400)
    p1 = [float(x) for x in re.findall(r"^round \d+: test P@1 ([\d.]+)", out, flags=re.M)]
    assert len(p1) == 3, out  # before round 1, after rounds 1 and 2
    assert re.search(r"FedMLH over Flower: 2 rounds, 0 failed client updates", out), out
    assert p1[-1] > p1[0] + 0.2, out
