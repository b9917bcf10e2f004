"""Thread count under load: `fedkernels run` at one thread, at two (OpenMP's default spin-waiting and
``OMP_WAIT_POLICY=PASSIVE``) and with the CLI's default, side by side while ``L`` busy processes load
the machine.

  python -m bench.fl.threads [--dataset ../shared/data/bibtex] [--rounds 4] [--loads 0 2 4] [--out F.json]
  python -m bench.fl.threads --quick [--out F.json]       # make bench: the synthetic demo data, 1 round, load +1

Each setting runs the same federated job as a subprocess (FedAvg, the dataset's defaults otherwise)
and reports its wall seconds, its CPU seconds (user + system of the child) and both as ratios to the
one-thread run of the same load. Extra load is ``L`` processes spinning in Python for the whole
measurement; the machine's own load average before they start is recorded beside it, since other
work on a shared machine adds to ``L``. The point of the CPU column: a thread that spin-waits for a
descheduled partner burns CPU without progress, so CPU seconds far above the one-thread run's mean
the threads are waiting, not working.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS: list[tuple[str, list[str], dict[str, str]]] = [
    ("threads 1", ["--threads", "1"], {}),
    ("threads 2 (OpenMP default wait policy)", ["--threads", "2"], {"OMP_WAIT_POLICY": ""}),
    ("threads 2, OMP_WAIT_POLICY=PASSIVE", ["--threads", "2"], {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("CLI default", [], {}),
]


def _cli() -> list[str]:
    """The `fedkernels` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("fedkernels")
    if not script.exists():
        raise SystemExit(f"no fedkernels command beside {sys.executable}: install the package first")
    return [str(script)]


def run_once(dataset: str, rounds: int, flags: list[str], env_over: dict[str, str]) -> dict:
    """One `fedkernels run` as a child process: wall and CPU seconds, training seconds, final P@1."""
    env = dict(os.environ)
    for k, v in env_over.items():
        if v:
            env[k] = v
        else:
            env.pop(k, None)
    with tempfile.TemporaryDirectory() as out:
        data = ["--demo"] if dataset == "demo" else ["--dataset", dataset]
        cmd = [*_cli(), "run", *data, "--algorithms", "FedAvg", "--rounds", str(rounds), *flags, "--out", out]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        results = json.loads((Path(out) / "results.json").read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    fedavg = results["results"][0]
    return {"wall_s": wall, "cpu_s": cpu, "train_s": fedavg["seconds"], "final_P@1": fedavg["final"]["P@1"]}


def measure(dataset: str, rounds: int, load: int) -> list[dict]:
    """Every setting at one extra load; the busy processes live for the whole group."""
    background = os.getloadavg()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
    try:
        time.sleep(2 if load else 0)
        rows = []
        for name, flags, env in SETTINGS:
            r = run_once(dataset, rounds, flags, env)
            rows.append({"setting": name, "extra_load": load, "background_load": background, **r})
            print(
                f"load +{load} (background {background[0]:.1f}) {name:42s} "
                f"wall {r['wall_s']:7.1f} s  cpu {r['cpu_s']:7.1f} s",
                flush=True,
            )
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    base = rows[0]
    for r in rows:
        r["wall_ratio_to_1_thread"] = r["wall_s"] / base["wall_s"]
        r["cpu_ratio_to_1_thread"] = r["cpu_s"] / base["cpu_s"]
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the synthetic demo data, one round, one busy process")
    p.add_argument("--dataset", default="../shared/data/bibtex", help="a dataset folder, or demo (synthetic)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--loads", type=int, nargs="+", default=[0, 2, 4], help="busy processes added")
    p.add_argument("--out", help="JSON of the rows")
    args = p.parse_args()
    if args.quick:
        args.dataset, args.rounds, args.loads = "demo", 1, [1]
    rows = [r for load in args.loads for r in measure(args.dataset, args.rounds, load)]
    if args.out:
        machine = {"cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
        Path(args.out).write_text(json.dumps({"args": vars(args), "machine": machine, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
