"""Wall time of the ``fedkernels`` commands that should answer at once, each in a fresh process.

    python tools/dev/cli_times.py             # the fedkernels_cli this interpreter imports
    python tools/dev/cli_times.py --repeat 5

Prints the median and the fastest of ``--repeat`` runs per command, whether the command's process
imported torch (``python -X importtime``), and the load average, which these times depend on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = (["--help"], ["run", "--list-presets"], ["data", "list"], ["bench"], ["info"])


def once(argv: list[str], env: dict[str, str]) -> tuple[float, bool]:
    """Seconds one run took, and whether it imported torch."""
    start = time.perf_counter()
    got = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fedkernels_cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    seconds = time.perf_counter() - start
    imported_torch = any(line.split("|")[-1].strip() == "torch" for line in got.stderr.splitlines())
    return seconds, imported_torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", FEDKERNELS_DATA_DIR=tempfile.mkdtemp())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for argv in COMMANDS:
        runs = [once(argv, env) for _ in range(args.repeat)]
        times = [t for t, _ in runs]
        torch = "imports torch" if any(t for _, t in runs) else "no torch"
        print(
            f"fedkernels {' '.join(argv):<22} median {statistics.median(times):6.2f} s  "
            f"fastest {min(times):6.2f} s  {torch}"
        )
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
