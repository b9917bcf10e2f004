"""Flower for real: a SuperLink and three SuperNodes (separate processes) on 127.0.0.1 run each
fedkernels strategy (FedAvg, FedMLH, FedSS, PartialExchange, L1Diff, and FedALC with its label-set
setup exchange and federated evaluation) for three rounds through ``fedkernels.integrations.flower``,
with a crash and a garbage upload injected; the final global state is bit-identical to the in-process
Server's with the same seed, the same faults and the same data, and FedALC's federated P@k/nDCG@k
equal the in-process Server's."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

flwr = pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

import torch  # noqa: E402  (after importorskip: skipped without flwr)

from fedkernels.fl import Server  # noqa: E402
from fedkernels.fl.checkpoint import load_checkpoint  # noqa: E402
from python_tests.flower_runs import (  # noqa: E402
    NUM_CLASSES,
    NUM_FEATURES,
    client_data,
    drill_wrapper,
    held_out_data,
    make_strategy,
    run_config,
)
from python_tests.helpers import child_pythonpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "python_tests" / "flower_app"
BIN = Path(sys.executable).parent
NUM_CLIENTS, ROUNDS, PER_ROUND, SEED = 3, 3, 2, 7
DRILL = "crash:2:0,garbage:0:1"  # client 2 crashes in round 0, client 0 sends garbage in round 1
DEADLINE = 900  # seconds for the whole deployment (process start-up dominates on a busy machine)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Deployment:
    """A SuperLink and SuperNodes as child processes, each in its own process group, all killed at exit."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.procs = tmp, []
        self.home = tmp / "flwr-home"
        self.home.mkdir()
        self.port = free_port()
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.home),
            "PYTHONPATH": child_pythonpath(),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def spawn(self, name: str, *args: str) -> subprocess.Popen:
        with open(self.tmp / f"{name}.log", "w") as log:  # the child holds its own copy of the descriptor
            p = subprocess.Popen(
                [str(BIN / args[0]), *args[1:]],
                env=self.env,
                cwd=self.tmp,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(p)
        return p

    def start(self) -> None:
        self.spawn(
            "superlink",
            "flower-superlink",
            "--insecure",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--disable-runtime-dependency-installation",
        )
        self.wait_for_port(self.port)
        for i in range(NUM_CLIENTS):
            self.spawn(
                f"supernode{i}",
                "flower-supernode",
                "--insecure",
                "--superlink",
                f"127.0.0.1:{self.port}",
                "--port",
                str(free_port()),
                "--node-config",
                f"partition-id={i} num-partitions={NUM_CLIENTS}",
            )

    def wait_for_port(self, port: int, timeout: float = 120.0) -> None:
        """Block until the SuperLink accepts connections (``flwr run`` does not retry)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"SuperLink did not listen on 127.0.0.1:{port} within {timeout} s:\n{self.tail()}")

    def run(self, strategy: str, checkpoint: Path) -> subprocess.CompletedProcess:
        overrides = (
            f"strategy='{strategy}' checkpoint='{checkpoint}' drill='{DRILL}' rounds={ROUNDS} seed={SEED} "
            f"num-clients={NUM_CLIENTS} clients-per-round={PER_ROUND} "
            f"federated-eval={str(strategy in FED_EVAL).lower()}"
        )
        cmd = [str(BIN / "flwr"), "run", str(APP), "test", "--stream", "-c", overrides]
        return subprocess.run(cmd, env=self.env, cwd=self.tmp, capture_output=True, text=True, timeout=DEADLINE)

    def stop(self) -> None:
        for p in self.procs:  # whole groups: SuperExec and app processes are grandchildren
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        end = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def tail(self) -> str:
        return "\n".join(f"--- {f.name}\n" + f.read_text()[-3000:] for f in sorted(self.tmp.glob("*.log")))


def in_process_reference(strategy: str) -> Server:
    clients = [client_data(i, NUM_CLIENTS, strategy) for i in range(NUM_CLIENTS)]
    s = Server(
        make_strategy(strategy),
        clients,
        NUM_FEATURES,
        NUM_CLASSES,
        run_config(ROUNDS, PER_ROUND, SEED),
        client_wrapper=drill_wrapper(DRILL),
    )
    s.run(
        held_out=[held_out_data(i, NUM_CLIENTS, strategy) for i in range(NUM_CLIENTS)] if strategy in FED_EVAL else None
    )
    return s


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = Deployment(tmp_path_factory.mktemp("flower"))
    dep.start()
    yield dep
    dep.stop()
    assert not any(p.poll() is None for p in dep.procs)  # everything torn down


# The strategies the issue names (FedMLH, FedSS, partial exchange, l1-difference) plus FedAvg; the
# adapter is generic, so any registered strategy runs the same way. One test, so one deployment even
# under pytest-xdist.
STRATEGIES = ["fedavg", "fedmlh", "fedss", "partialexchange", "l1diff", "fedalc"]
FED_EVAL = ("fedalc",)  # runs federated evaluation too (Flower's evaluate messages)


def test_flower_matches_in_process(deployment):
    for strategy in STRATEGIES:
        check_strategy(deployment, strategy)


def check_strategy(deployment: Deployment, strategy: str) -> None:
    ckpt = deployment.tmp / f"{strategy}.ckpt"
    done = deployment.run(strategy, ckpt)
    assert done.returncode == 0 and ckpt.exists(), done.stdout[-3000:] + done.stderr[-3000:] + deployment.tail()
    ref = in_process_reference(strategy)
    state, meta = load_checkpoint(ckpt, ref.state)
    assert meta["round"] == ROUNDS and meta["strategy"] == ref.strategy.name
    assert all(state[k].dtype == ref.state[k].dtype and (state[k] == ref.state[k]).all() for k in ref.state)
    for got, want in zip(meta["history"], ref.history, strict=True):
        assert got["clients"] == want.clients and got["bytes_up"] == want.bytes_up
        assert got["bytes_down"] == want.bytes_down
        assert got["metrics"] == want.metrics  # FedALC: the federated P@k/nDCG@k, bit for bit
        assert [c for c, _ in got["failed"]] == [c for c, _ in want.failed]
        for (_, g), (_, w) in zip(got["failed"], want.failed, strict=True):
            assert g.split(":")[0] == w.split(":")[0], (g, w)  # same kind: crashed / rejected
    assert [len(h.failed) for h in ref.history] == [1, 1, 0]  # the drill really failed clients
    # An in-process Server resumes from the Flower checkpoint (same format).
    again = Server(
        make_strategy(strategy),
        [client_data(i, NUM_CLIENTS, strategy) for i in range(NUM_CLIENTS)],
        NUM_FEATURES,
        NUM_CLASSES,
        dataclasses.replace(run_config(ROUNDS, PER_ROUND, SEED), checkpoint=str(ckpt)),
    )
    assert again.round == ROUNDS and all(torch.equal(again.state[k], ref.state[k]) for k in ref.state)
