"""Cohort nodes for real: a SuperLink and two SuperNodes (separate processes on 127.0.0.1, no TLS: the
per-client deployment test, hardening/test_flower.py, covers TLS and node keys) run the cohort test app
(python_tests/support/flower_cohort_app) with ``flwr run``. Each SuperNode serves half of 24 clients
and gets one message per round; the run ends bit-identical to the in-process batched run of the same
seed. Few processes: one identify and one train message per node per round, each ClientApp process
forked from a warm parent that imported torch once (python_tests/support/warm_clientapp.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

import torch

from fedkernels.fl.checkpoint import load_checkpoint
from fedkernels.testing.flower_sim import Settings, in_process_run
from python_tests.support import warm_clientapp
from python_tests.support.helpers import child_pythonpath
from python_tests.support.local_ports import free_port, log_tails, wait_for_port
from python_tests.support.paths import ROOT

APP = ROOT / "python_tests" / "support" / "flower_cohort_app"
BIN = Path(sys.executable).parent
NODES, CLIENTS, PER_ROUND, ROUNDS, SEED = 2, 24, 10, 2, 6
DEADLINE = 300  # seconds for the run (process start-up dominates on a busy machine)


def test_two_cohort_supernodes_match_in_process(tmp_path):
    home = tmp_path / "flwr-home"
    home.mkdir()
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PYTHONPATH": child_pythonpath(),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    warm, env = warm_clientapp.start(tmp_path, env)  # the ClientApp processes fork from it
    procs: list[subprocess.Popen] = [warm]

    def spawn(name: str, *args: str) -> None:
        with open(tmp_path / f"{name}.log", "a") as log:
            procs.append(
                subprocess.Popen(
                    [str(BIN / args[0]), *args[1:]],
                    env=env,
                    cwd=tmp_path,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own group: SuperExec and app processes are grandchildren
                )
            )

    ckpt, result = tmp_path / "run.ckpt", tmp_path / "result.json"
    try:
        spawn("superlink", "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port", str(port),
              "--disable-runtime-dependency-installation")  # fmt: skip
        wait_for_port(port, lambda: log_tails(tmp_path))
        for i in range(NODES):
            spawn(f"supernode{i}", "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{port}",
                  "--port", str(free_port()), "--max-retries", "3",
                  "--node-config", f"partition-id={i} num-partitions={NODES}")  # fmt: skip
        overrides = (
            f"num-clients={CLIENTS} clients-per-round={PER_ROUND} rounds={ROUNDS} seed={SEED} "
            f"checkpoint='{ckpt}' result='{result}'"
        )
        done = subprocess.run(
            [str(BIN / "flwr"), "run", str(APP), "local", "-c", overrides, "--stream"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode == 0 and ckpt.exists(), done.stdout[-3000:] + done.stderr[-3000:] + log_tails(tmp_path)
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    s = Settings(
        num_clients=CLIENTS, clients_per_round=PER_ROUND, rounds=ROUNDS, seed=SEED, cohort=True, batch_clients=True
    )
    ref = in_process_run(s, threads=None)  # a SuperNode's ClientApp runs on torch's default threads, as here
    state, meta = load_checkpoint(ckpt, ref.state)
    assert meta["round"] == ROUNDS
    assert all(torch.equal(state[k], ref.state[k]) for k in ref.state)
    assert [(h["clients"], h["failed"], h["bytes_up"]) for h in meta["history"]] == [
        (h.clients, h.failed, h.bytes_up) for h in ref.history
    ]
    out = json.loads(result.read_text())
    assert out["done"] and out["joined"] == NODES
    assert out["messages"] == {"query.fedkernels_identify": NODES, "train": ROUNDS * NODES}
