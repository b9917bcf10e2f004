"""bench/common.py's --isa: a bench restarts itself with FK_CPU_ISA set (fedkernels reads it once, at
import) and its JSON's machine.cpu_isa records the level that ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from python_tests.support.helpers import child_pythonpath
from python_tests.support.paths import ROOT

SCRIPT = """
import argparse, json, os, sys
from bench import common
ap = argparse.ArgumentParser()
common.add_device_arguments(ap)
args = ap.parse_args()
common.check_device_arguments(ap, args)
print("RESULT " + json.dumps({"env": os.environ.get("FK_CPU_ISA"), "machine": common.machine()["cpu_isa"]}))
"""


@pytest.mark.parametrize("as_module", [True, False], ids=["python -m", "python path"])
def test_isa_flag_restarts_at_that_level_and_records_it(tmp_path, as_module):
    """The benches run as ``python -m bench.ops.x``: the restart must come back as that module, same arguments."""
    (tmp_path / "fakebench").mkdir()
    (tmp_path / "fakebench" / "__init__.py").write_text("")
    (tmp_path / "fakebench" / "fake_bench.py").write_text(SCRIPT)
    target = ["-m", "fakebench.fake_bench"] if as_module else [str(tmp_path / "fakebench" / "fake_bench.py")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([child_pythonpath(), str(ROOT)]))
    env.pop("FK_CPU_ISA", None)
    r = subprocess.run(
        [sys.executable, *target, "--isa", "generic"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert "fedkernels CPU kernels: generic (host supports" in r.stdout
    got = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert got["env"] == "generic"
    assert got["machine"]["level"] == "generic" and got["machine"]["cap"] == "generic"
    assert got["machine"]["host"] in ("generic", "avx2", "avx512")
