"""Rounds per second and server peak memory of the Flower adapter under load: 10, 30 and 100
clients, 30% faulty every round (crashes, time-outs, empty, garbage, oversized uploads, bombs), for
every strategy family; each run is checked bit-identical to the in-process run that omits the
faulty clients' uploads. How the clients are hosted and why: ``python_tests/flower_load.py``.

    PYTHONPATH=src python bench/flower_load.py                       # 10, 30, 100 clients, all families
    PYTHONPATH=src python bench/flower_load.py --clients 100 --strategies fedavg --rounds 2

Prints a Markdown table: rounds per second of the Flower run (start-up excluded; every round waits
for the deadline, since some client always hangs) and the server process's peak RSS growth over
the run (VmHWM, reset before it) in MiB.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # python_tests.* (the load machinery, tiny data, strategy options)
    sys.path.append(str(ROOT))

from python_tests.flower_load import FAMILIES, check, flower_run, reference_run  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[10, 30, 100])
    p.add_argument("--strategies", nargs="+", default=FAMILIES)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)  # Flower's per-round summaries
    print("| strategy | clients | rounds/s | server peak RSS growth (MiB) | failed / chosen | equals in-process |")
    print("|---|---|---|---|---|---|")
    for strategy in args.strategies:
        for n in args.clients:
            fk, seconds, peak = flower_run(strategy, n, args.rounds, args.seed, args.timeout, args.workers)
            ref = reference_run(strategy, n, args.rounds, args.seed)
            check(fk, ref)
            failed = sum(len(h.failed) for h in fk.history)
            chosen = sum(len(h.clients) for h in fk.history)
            print(
                f"| {strategy} | {n} | {args.rounds / seconds:.2f} | {peak:.1f} | {failed} / {chosen} | yes |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
