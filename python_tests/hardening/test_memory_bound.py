"""The server's memory per round is bounded by a multiple of the model size whatever clients send
(docs/api/hardening.md, "Memory bound"): in-process runs in child processes, clean and with hostile
clients sending bombs, oversized, malformed and non-finite uploads and FedSS's 16 MB request every
round (``python_tests/support/hardening_memory.py``). Peak-RSS growth over the measured rounds (VmHWM reset
after a warm-up round) must stay within the stated bound, and the hostile run may not exceed the
clean one by more than one rejected upload's worth."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from python_tests.support.hardening_memory import CLIENTS_PER_ROUND, ROUNDS
from python_tests.support.paths import ROOT

SLACK_MIB = 32  # allocator caching, interpreter noise, the 4 MiB header bound: measured clean runs vary by ~10 MiB


def bound_mib(model_mib: float, c: int = CLIENTS_PER_ROUND) -> float:
    """The documented bound on a round's memory above the state: (2.1 c + 7.2) x the model + slack."""
    return (2.1 * c + 7.2) * model_mib + SLACK_MIB


def child(name: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if "asan" in env.get("LD_PRELOAD", ""):
        env["FK_NO_RLIMIT"] = "1"
    res = subprocess.run(
        [sys.executable, "-m", "python_tests.support.hardening_memory", name],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["fedavg", "fedss", "l1diff"])
def test_hostile_clients_stay_within_the_memory_bound(name):
    got = child(name)
    clean, hostile = got["clean"], got["hostile"]
    assert clean["failed"] == [] and clean["finite"] and hostile["finite"]
    reasons = [why for _, why in hostile["failed"]]
    assert len(reasons) >= ROUNDS - 1  # someone misbehaved in every measured round ...
    assert all(why.startswith("rejected: ") for why in reasons), reasons  # ... and was rejected, never "crashed"
    m = hostile["model_mib"]
    assert clean["growth_mib"] <= bound_mib(m), clean
    assert hostile["growth_mib"] <= bound_mib(m), hostile
    # a rejected upload costs at most its bytes and the decode's two copies of them (<= 3.1 x the model)
    assert hostile["growth_mib"] <= clean["growth_mib"] + 3.1 * m + SLACK_MIB, (clean, hostile)


def test_fedalc_setup_reports_stay_within_the_setup_bound():
    """FedALC's setup at C = 3000 with the sweep's clique report (unbounded: 9M pair weights, +658 MiB) and
    a report of twice ``max_report_pairs`` pairs: both refused, the pair weights those of the honest
    clients, and the hostile run's peak may exceed the clean one's by at most one refused report's
    bytes and its decode (3.1 x the largest report) plus slack."""
    got = child("fedalc-setup")
    clean, hostile = got["clean"], got["hostile"]
    assert clean["failed"] == [] and hostile["failed"] == [90, 91]
    assert hostile["pair_weights"] == clean["pair_weights"] < 3000
    assert hostile["growth_mib"] <= clean["growth_mib"] + 3.1 * hostile["largest_report_mib"] + SLACK_MIB, got


def test_a_10000_round_hostile_history_checkpoint_stays_loadable_and_bounded():
    """A 10,000-round run with four rejected clients a round: the checkpoint loads (an unbounded header
    would pass the loader's 4 MiB after about 1,100 such rounds), its size is the model plus the history,
    and saving or loading it grows the peak by at most the model plus 6 x the history's JSON bytes (the
    records as Python objects, their JSON text, the file's bytes; the writer parses what it wrote, as
    the reader will)."""
    got = child("long-history")
    assert got["rounds"] == 10_000 and got["same"], got
    assert got["file_mib"] <= got["model_mib"] + got["history_mib"] + 1, got
    bound = got["model_mib"] + 6 * got["history_mib"] + SLACK_MIB
    assert got["save_growth_mib"] <= bound and got["load_growth_mib"] <= bound, got
