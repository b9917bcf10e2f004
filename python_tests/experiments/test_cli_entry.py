"""The ``fedkernels`` script's front door: help and usage errors answer without importing torch, and
the parser's defaults are the config's."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedkernels_cli
from fedkernels.cli import main
from fedkernels.experiments.experiment import DEFAULT_OPTIONS, ExperimentConfig
from fedkernels_cli import defaults
from fedkernels_cli.main import main as script_main

# run the entry as the console script does, then report which heavy modules the process imported
PROBE = """
import sys
from fedkernels_cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
else:
    code = 0
print("imported:", sorted(m for m in ("torch", "fedkernels", "numpy") if m in sys.modules), "exit:", code)
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["run", "--help"], ["data", "--help"], ["run", "--no-such-flag"], ["no-such-command"], []],
)
def test_help_and_usage_errors_do_not_import_torch(argv: list[str]) -> None:
    env = dict(os.environ)
    src = str(Path(fedkernels_cli.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    got = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    last = got.stdout.strip().splitlines()[-1]
    assert last.startswith("imported: []"), (last, got.stderr[-2000:])
    assert last.endswith("exit: 0" if "--help" in argv else "exit: 2"), (last, got.stderr[-2000:])


def test_the_package_entry_is_the_script_entry() -> None:
    assert main is script_main  # fedkernels.cli.main: one implementation, for in-process callers


def test_config_defaults_are_the_parsers() -> None:
    fields = {f.name for f in dataclasses.fields(ExperimentConfig)}
    assert fields == set(defaults.RUN_DEFAULTS)
    a, b = ExperimentConfig(), ExperimentConfig()
    assert dataclasses.asdict(a) == defaults.RUN_DEFAULTS
    a.ks.append(7)
    a.algorithm_options["FedAvg"] = {}
    assert b.ks == [1, 3, 5] and not b.algorithm_options  # each config owns its lists and dicts
    assert defaults.RUN_DEFAULTS["ks"] == [1, 3, 5]
    assert DEFAULT_OPTIONS is defaults.DEFAULT_OPTIONS
