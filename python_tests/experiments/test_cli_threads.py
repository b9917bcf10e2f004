"""The loop's thread count: one by default (docs/install.md "Threads"), and `fedkernels run` with more
threads makes torch's OpenMP sleep while it waits instead of spinning."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fedkernels.experiments.experiment import ExperimentConfig
from fedkernels_cli import parser
from fedkernels_cli.config import build_config


def test_the_default_is_one_thread_in_the_api_and_the_cli() -> None:
    assert ExperimentConfig().threads == 1
    assert build_config(parser().parse_args(["run", "--demo"])).threads == 1
    assert build_config(parser().parse_args(["run", "--demo", "--threads", "2"])).threads == 2


# The policy must be in the environment before torch loads (its OpenMP reads it once): a fresh process
# runs the CLI's entry with the command itself replaced by a probe that reports what it saw.
_PROBE = """
import os, sys
import fedkernels_cli.dispatch as dispatch
dispatch.run_command = lambda args: print(os.environ.get("OMP_WAIT_POLICY"), "torch" in sys.modules) or 0
from fedkernels_cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _probe(argv: list[str], policy: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if policy is not None:
        env["OMP_WAIT_POLICY"] = policy
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("argv", "policy", "seen"),
    [
        (["run", "--demo", "--threads", "2"], None, "PASSIVE False"),
        (["run", "--demo"], None, "PASSIVE False"),
        (["run", "--demo", "--threads", "2"], "ACTIVE", "ACTIVE False"),  # the user's choice stands
        (["data", "list"], None, "None False"),  # only a run trains
    ],
)
def test_run_sets_a_passive_wait_policy_before_torch_loads(argv: list[str], policy: str | None, seen: str) -> None:
    assert _probe(argv, policy) == seen
