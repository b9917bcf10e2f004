"""bench/common.py's --isa: a bench restarts itself with FK_CPU_ISA set (fedkernels reads it once, at
import) and its JSON's machine.cpu_isa records the level that ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from python_tests.support.helpers import child_pythonpath
from python_tests.support.paths import ROOT

SCRIPT = """
import argparse, json, os, sys
import common
ap = argparse.ArgumentParser()
common.add_device_arguments(ap)
args = ap.parse_args()
common.check_device_arguments(ap, args)
print("RESULT " + json.dumps({"env": os.environ.get("FK_CPU_ISA"), "machine": common.machine()["cpu_isa"]}))
"""


def test_isa_flag_restarts_at_that_level_and_records_it(tmp_path):
    script = tmp_path / "fake_bench.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([child_pythonpath(), str(ROOT / "bench")]))
    env.pop("FK_CPU_ISA", None)
    r = subprocess.run(
        [sys.executable, str(script), "--isa", "generic"], env=env, capture_output=True, text=True, timeout=180
    )
    assert r.returncode == 0, r.stderr
    assert "fedkernels CPU kernels: generic (host supports" in r.stdout
    got = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert got["env"] == "generic"
    assert got["machine"]["level"] == "generic" and got["machine"]["cap"] == "generic"
    assert got["machine"]["host"] in ("generic", "avx2", "avx512")
