"""What every fuzz test file shares: the hypothesis test over one target's mutated seeds, the seed
check, and the bounded child run (:mod:`python_tests.fuzz.bounded`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import strategies as st

from python_tests.fuzz.bounded import BOUND_MIB
from python_tests.fuzz.mutate import mutate, mutation_strategy, verdict
from python_tests.fuzz.targets import target

ROOT = Path(__file__).resolve().parents[2]


def check_seeds(name: str) -> None:
    """Every seed of ``name``: ``valid*`` ones (and a strategy's honest ``<s>.request``/``<s>.upload``)
    accepted, ``hostile*`` ones (and a strategy's ``<s>.<kind>_<what>``) refused with ValueError."""
    seeds_, check = target(name)
    assert seeds_, f"no seeds for {name}"
    for k, data in seeds_.items():
        stem = k.rsplit(".", 1)[0]
        honest = k.startswith("valid") or (":" in name and "_" not in stem.split(".", 1)[1])
        want = "ok" if honest else "rejected"
        assert verdict(check, data) == want, (name, k, verdict(check, data))


def fuzz_mutations(name: str, data: st.DataObject) -> None:
    """One hypothesis example: a seed of ``name`` with 1-4 mutations; no finding allowed."""
    seeds_, check = target(name)
    others = list(seeds_.values())
    k = data.draw(st.sampled_from(sorted(seeds_)), label="seed")
    ops = data.draw(st.lists(mutation_strategy(others), min_size=1, max_size=4), label="ops")
    buf = seeds_[k]
    for op in ops:
        buf = mutate(buf, op, others)
    v = verdict(check, buf)
    assert v in ("ok", "rejected"), (name, k, ops, v)


def run_bounded(names: list[str], cases: int, seed: int = 0) -> dict:
    """The bounded child run over ``names``; asserts no finding and peak growth <= BOUND_MIB."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if "asan" in env.get("LD_PRELOAD", ""):  # ASan reserves terabytes of address space: no RLIMIT_AS
        env["FK_NO_RLIMIT"] = "1"
    res = subprocess.run(
        [sys.executable, "-m", "python_tests.fuzz.bounded", str(cases), str(seed), *names],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert not got["findings"], got["findings"][:5]
    assert got["peak_growth_mib"] < BOUND_MIB, got
    return got
