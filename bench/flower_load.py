"""Rounds per second and server peak memory of the Flower adapter under load: 10, 30 and 100
clients, 30% faulty every round (crashes, time-outs, empty, garbage, oversized uploads, bombs), for
every strategy family; each run is checked bit-identical to the in-process run that omits the
faulty clients' uploads. How the clients are hosted and why: ``python_tests/flower_load.py``.

    PYTHONPATH=src python bench/flower_load.py                       # 10, 30, 100 clients, all families
    PYTHONPATH=src python bench/flower_load.py --clients 100 --strategies fedavg --rounds 2
    PYTHONPATH=src python bench/flower_load.py --quick   # smoke run: 10 clients, 2 rounds, 1 s deadline, 3 families

Prints a Markdown table: rounds per second of the Flower run (start-up excluded; every round waits
for the deadline, since some client always hangs) and the server process's peak RSS growth over
the run (VmHWM, reset before it) in MiB, and writes the rows as JSON to build/bench-results/flower_load.json
(``--out PATH`` elsewhere; the committed table is bench/results/flower_load.md, copied from a full run's output).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # python_tests.* (the load machinery, tiny data, strategy options)
    sys.path.append(str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import results_path, write_results  # noqa: E402

from python_tests.flower_load import FAMILIES, check, flower_run, reference_run  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="+", default=[10, 30, 100])
    p.add_argument("--strategies", nargs="+", default=FAMILIES)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="result JSON (default: build/bench-results/flower_load.json)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 10 clients, 2 rounds, 1 s deadline, three families (dense, sparse rows, codec)",
    )
    args = p.parse_args()
    if args.quick:  # the quick settings become the defaults: explicit flags still win
        p.set_defaults(clients=[10], rounds=2, timeout=1.0, strategies=["fedavg", "fedss", "l1diff"])
        args = p.parse_args()
    rows = []
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
            rows.append(
                {
                    "strategy": strategy,
                    "clients": n,
                    "rounds/s": args.rounds / seconds,
                    "server peak RSS growth MiB": peak,
                    "failed": failed,
                    "chosen": chosen,
                    "equals in-process": True,  # check() raised otherwise
                }
            )
            print(
                f"| {strategy} | {n} | {args.rounds / seconds:.2f} | {peak:.1f} | {failed} / {chosen} | yes |",
                flush=True,
            )
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    path = write_results("flower_load", rows, {"settings": settings}, path=results_path("flower_load", out=args.out))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
