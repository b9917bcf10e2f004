"""The fuzz targets' allocation check, run in a child process: ``python -m python_tests.fuzz.bounded
CASES SEED [TARGET ...]`` decodes every seed and ``CASES`` random mutations of them per target under
``RLIMIT_AS`` = the child's size after set-up + :data:`HEADROOM_MIB` (so a bomb that got through
fails as a finding instead of taking the machine), and prints one JSON line: the findings and the
peak-RSS growth (VmHWM, reset after set-up) over all cases.

Every seed and mutation is at most a few KiB, and each decoder's memory is bounded by its input (or
by what its caller expects: the spec, the state, the expected shape), so the whole run must stay
within :data:`BOUND_MIB` however large the sizes the mutated bytes claim (up to 2^64)."""

from __future__ import annotations

import json
import os
import random
import resource
import sys

from python_tests.fuzz.mutate import mutate, random_op, verdict
from python_tests.fuzz.targets import all_targets, target

HEADROOM_MIB = 512
BOUND_MIB = 64


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _reset_peak() -> float:
    """Start a new peak-RSS window (VmHWM := VmRSS; Linux >= 4.0); the RSS it starts from, MiB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS") / 1024


def run(cases: int, seed: int, names: list[str]) -> dict:
    targets = {n: target(n) for n in names}  # set-up (models, clients, corpus) before the limit
    for seeds_, check in targets.values():  # warm every path once (lazy imports, first allocations)
        verdict(check, next(iter(seeds_.values())))
    if not os.environ.get("FK_NO_RLIMIT"):
        vm = _status_kib("VmSize") * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (HEADROOM_MIB << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
    base = _reset_peak()
    rng = random.Random(seed)
    findings, count = [], 0
    for n, (seeds_, check) in targets.items():
        others = list(seeds_.values())
        inputs = [(k, v, []) for k, v in seeds_.items()]
        for _ in range(cases):
            k = rng.choice(sorted(seeds_))
            ops = [random_op(rng) for _ in range(rng.randint(1, 4))]
            data = seeds_[k]
            for op in ops:
                data = mutate(data, op, others)
            inputs.append((k, data, ops))
        for k, data, ops in inputs:
            v = verdict(check, data)
            count += 1
            if v not in ("ok", "rejected"):
                findings.append({"target": n, "seed": k, "ops": repr(ops), "verdict": v[:300]})
    return {"cases": count, "findings": findings, "peak_growth_mib": _status_kib("VmHWM") / 1024 - base}


if __name__ == "__main__":
    cases, seed = int(sys.argv[1]), int(sys.argv[2])
    names = sys.argv[3:] or all_targets()
    print(json.dumps(run(cases, seed, names)))
