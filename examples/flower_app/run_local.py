"""Run this Flower App on one machine over loopback: a SuperLink and N SuperNodes on 127.0.0.1, then
``flwr run`` (the same commands as a real deployment, docs/api/flower.md, minus TLS).

    python examples/flower_app/run_local.py                    # FedMLH, 2 clients, 2 rounds
    python examples/flower_app/run_local.py --strategy FedAvg --rounds 5

Needs ``fedkernels[flower]`` in the running Python (the Flower commands are taken from its bin folder).
Everything it starts is stopped when it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

APP = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, procs: list[subprocess.Popen], timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a Flower process exited during start-up")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the SuperLink did not listen on 127.0.0.1:{port} within {timeout:g} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--strategy", default="FedMLH")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    missing = [b for b in ("flower-superlink", "flower-supernode", "flwr") if not (BIN / b).exists()]
    if missing:
        print(
            f"run_local.py: {', '.join(missing)} not found next to {sys.executable}; pip install 'fedkernels[flower]'",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="fk-flower-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        (tmp / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
        )
        env = {**os.environ, "FLWR_HOME": str(tmp), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        procs: list[subprocess.Popen] = []

        def spawn(name: str, *cmd: str) -> None:
            with open(tmp / f"{name}.log", "w") as log:  # the child holds its own copy of the descriptor
                procs.append(
                    subprocess.Popen(
                        [str(BIN / cmd[0]), *cmd[1:]],
                        env=env,
                        cwd=tmp,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

        try:
            spawn(
                "superlink",
                "flower-superlink",
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
            )
            wait_for_port(port, procs)
            for i in range(args.clients):
                spawn(
                    f"supernode{i}",
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{port}",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    f"partition-id={i} num-partitions={args.clients}",
                )
            result = tmp / "result.json"
            overrides = (
                f"strategy='{args.strategy}' rounds={args.rounds} num-clients={args.clients} "
                f"clients-per-round={args.clients} seed={args.seed} result-file='{result}'"
            )
            print(f"SuperLink on 127.0.0.1:{port}, {args.clients} SuperNodes; flwr run {APP.name} ...", flush=True)
            done = subprocess.run(
                [str(BIN / "flwr"), "run", str(APP), "local", "--stream", "-c", overrides],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0 or not result.exists():
                logs = "\n".join(f"--- {f.name}\n{f.read_text()[-2000:]}" for f in sorted(tmp.glob("*.log")))
                print(
                    f"flwr run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{logs}",
                    file=sys.stderr,
                )
                return 1
        finally:
            for proc in procs:  # whole process groups: Flower starts app processes below them
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        res = json.loads(result.read_text())
    for r in res["rounds"]:
        print(f"round {r['round']}: test P@1 {r['P@1']:.3f}")
    up = sum(h["bytes_up"] for h in res["history"])
    down = sum(h["bytes_down"] for h in res["history"])
    failed = sum(len(h["failed"]) for h in res["history"])
    fed = res["history"][-1]["federated"]
    if fed:
        print("federated (clients' own held-out shards): " + ", ".join(f"{k[4:]} {v:.3f}" for k, v in fed.items()))
    print(
        f"{res['strategy']} over Flower: {len(res['history'])} rounds, {failed} failed client updates, "
        f"{up / 1e3:.1f} kB up, {down / 1e3:.1f} kB down; P@1 {res['rounds'][0]['P@1']:.3f} -> "
        f"{res['rounds'][-1]['P@1']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
