"""Flower for real: a SuperLink and SuperNodes (separate processes, TLS, SuperNode authentication) on
127.0.0.1 run the test app (python_tests/support/flower_app) through ``fedkernels.integrations.flower``.

- ``make test``: FedAvg for three rounds with a crash and a garbage upload injected ends bit-identical
  to the in-process Server with the same seed, faults and data, and SecAgg+ survives killed SuperNodes
  (a privacy claim: it runs wherever the tests run). Every strategy runs the same app over Flower
  messages in one process (integrations/test_flower_strategies.py): what this test adds is the
  deployment (a process per message, TLS, registered keys), which one strategy proves. Each message's
  ClientApp process is forked from a warm parent that imported torch once
  (python_tests/support/warm_clientapp.py): a process per message without the imports per message.
- ``make test-deployment`` (marked ``deployment``; run by hand, not in CI, for CI's time): the same for
  FedALC (its label-set setup exchange and federated evaluation over the wire; its in-process twin runs
  in make test), nodes that come and go and a killed ServerApp that resumes (the resume's in-process
  twin: integrations/test_flower_protocol.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

flwr = pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

import torch  # noqa: E402  (after importorskip: skipped without flwr)

from fedkernels.fl import Server  # noqa: E402
from fedkernels.fl.checkpoint import load_checkpoint  # noqa: E402
from python_tests.support import warm_clientapp  # noqa: E402
from python_tests.support.flower_runs import (  # noqa: E402
    DRILL,
    FED_EVAL,
    NUM_CLASSES,
    NUM_CLIENTS,
    NUM_FEATURES,
    PER_ROUND,
    ROUNDS,
    SEED,
    assert_matches_reference,
    client_data,
    make_strategy,
    run_config,
)
from python_tests.support.helpers import child_pythonpath  # noqa: E402
from python_tests.support.local_ports import free_port, log_tails, wait_for_port  # noqa: E402
from python_tests.support.paths import ROOT  # noqa: E402

APP = ROOT / "python_tests" / "support" / "flower_app"
BIN = Path(sys.executable).parent
DEADLINE = 900  # seconds for the whole deployment (process start-up dominates on a busy machine)
pytestmark = pytest.mark.xdist_group("flower-deployment")  # one deployment for the module's tests


class Deployment:
    """A SuperLink (TLS, SuperNode authentication) and SuperNodes as child processes on 127.0.0.1,
    each in its own process group, all killed at exit. Node ``i < NUM_CLIENTS`` serves client i
    with registered key i; node ``NUM_CLIENTS`` (registered key) also claims client 1 (a duplicate
    claim, refused every run); a node with an unregistered key is never admitted."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.procs = tmp, []
        self.nodes: dict[int, subprocess.Popen] = {}
        self.home = tmp / "flwr-home"
        self.home.mkdir()
        self.port = free_port()
        self.ca = write_tls(tmp)
        self.keys = [write_node_key(tmp, f"node{i}") for i in range(NUM_CLIENTS + 2)]
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "test"\n\n[superlink.test]\naddress = "127.0.0.1:{self.port}"\n'
            f'root-certificates = "{self.ca}"\n'
        )
        self.partition_keys = tmp / "partition-keys.toml"  # client i -> node i's public key
        self.partition_keys.write_text(
            "".join(f'{i} = "{Path(str(self.keys[i]) + ".pub").read_text().strip()}"\n' for i in range(NUM_CLIENTS))
        )
        self.env = {
            **os.environ,
            "FLWR_HOME": str(self.home),
            "PYTHONPATH": child_pythonpath(),
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        warm, self.env = warm_clientapp.start(tmp, self.env)  # the ClientApp processes fork from it
        self.procs.append(warm)

    def spawn(self, name: str, *args: str) -> subprocess.Popen:
        with open(self.tmp / f"{name}.log", "a") as log:  # the child holds its own copy of the descriptor
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
            "--ssl-ca-certfile",
            str(self.ca),
            "--ssl-certfile",
            str(self.tmp / "server.pem"),
            "--ssl-keyfile",
            str(self.tmp / "server.key"),
            "--enable-supernode-auth",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--disable-runtime-dependency-installation",
        )
        wait_for_port(self.port, self.tail)
        for i in range(NUM_CLIENTS + 1):  # the registered keys; the last one is never registered
            self.flwr("supernode", "register", str(self.keys[i]) + ".pub", "test")
        for i in range(NUM_CLIENTS + 2):
            self.start_node(i)

    def start_node(self, i: int, partition: int | None = None, partitions: int = NUM_CLIENTS) -> None:
        """Node i: client i (node NUM_CLIENTS claims client 1; node NUM_CLIENTS + 1 has no registered
        key); with ``partition``, node i (a key :meth:`add_key` made) serves that client."""
        if partition is None:
            partition = i if i < NUM_CLIENTS else 1
        self.nodes[i] = self.spawn(
            f"supernode{i}",
            "flower-supernode",
            "--root-certificates",
            str(self.ca),
            "--auth-supernode-private-key",
            str(self.keys[i]),
            "--superlink",
            f"127.0.0.1:{self.port}",
            "--port",
            str(free_port()),
            "--max-retries",
            "3",
            "--node-config",
            f"partition-id={partition} num-partitions={partitions}",
        )

    def add_key(self) -> int:
        """A new node key, registered at the SuperLink; returns its node index."""
        i = len(self.keys)
        self.keys.append(write_node_key(self.tmp, f"node{i}"))
        self.flwr("supernode", "register", str(self.keys[i]) + ".pub", "test")
        return i

    def stop_node(self, i: int) -> None:
        """Stop node i (SIGTERM to its group: the SuperNode deactivates itself at the SuperLink)."""
        p = self.nodes.pop(i)
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=60)

    def flwr(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [str(BIN / "flwr"), *args], env=self.env, cwd=self.tmp, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"flwr {' '.join(args)}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        return done.stdout

    def online(self) -> int:
        """How many SuperNodes the SuperLink lists as online."""
        rows = json.loads(self.flwr("supernode", "ls", "test", "--format", "json")).get("nodes", [])
        return sum(str(r.get("status", "")).lower() == "online" for r in rows)

    def wait_online(self, n: int, timeout: float = 180) -> None:
        end = time.monotonic() + timeout
        while self.online() != n:
            assert time.monotonic() < end, f"{self.online()} nodes online, expected {n}:\n{self.tail()}"
            time.sleep(1)

    def overrides(self, strategy: str, checkpoint: Path, **extra: str) -> str:
        keys = {
            "strategy": f"'{strategy}'",
            "checkpoint": f"'{checkpoint}'",
            "drill": f"'{DRILL}'",
            "rounds": str(ROUNDS),
            "seed": str(SEED),
            "num-clients": str(NUM_CLIENTS),
            "clients-per-round": str(PER_ROUND),
            "federated-eval": str(strategy in FED_EVAL).lower(),
            **extra,
        }
        return " ".join(f"{k}={v}" for k, v in keys.items())

    def run(self, strategy: str, checkpoint: Path, stream: bool = True, **extra: str):
        cmd = [str(BIN / "flwr"), "run", str(APP), "test", "-c", self.overrides(strategy, checkpoint, **extra)]
        if not stream:  # submit and return: the test drives the run through its barriers
            return subprocess.run(cmd, env=self.env, cwd=self.tmp, capture_output=True, text=True, timeout=300)
        return subprocess.run(
            [*cmd, "--stream"], env=self.env, cwd=self.tmp, capture_output=True, text=True, timeout=DEADLINE
        )

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
        return log_tails(self.tmp)


def write_tls(tmp: Path) -> Path:
    """A CA and a server certificate for 127.0.0.1 / localhost (tmp/ca.pem, server.pem, server.key)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("fedkernels test CA"))
        .issuer_name(name("fedkernels test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp / "server.pem").write_bytes(cert.public_bytes(pem))
    (tmp / "server.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tmp / "ca.pem"


def write_node_key(tmp: Path, stem: str) -> Path:
    """A SuperNode's P-384 key pair in OpenSSH formats (tmp/<stem>, tmp/<stem>.pub)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    path = tmp / stem
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    )
    path.chmod(0o600)
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    Path(str(path) + ".pub").write_bytes(pub + b"\n")
    return path


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    dep = Deployment(tmp_path_factory.mktemp("flower"))
    dep.start()
    dep.wait_online(NUM_CLIENTS + 1)  # the unregistered key is never admitted
    yield dep
    dep.stop()
    assert not any(p.poll() is None for p in dep.procs)  # everything torn down


# FedAvg, the fewest messages, in make test; FedALC, every message kind of the protocol (identify, the
# label-set setup, train, evaluate), in the deployment step. The strategies differ only in payloads,
# which the in-process twin (integrations/test_flower_strategies.py) checks for every one.
@pytest.mark.parametrize("strategy", ["fedavg", pytest.param("fedalc", marks=pytest.mark.deployment)])
def test_flower_matches_in_process(deployment, strategy):
    ckpt, result = deployment.tmp / f"{strategy}.ckpt", deployment.tmp / f"{strategy}.json"
    done = deployment.run(strategy, ckpt, **{"result-file": f"'{result}'"})
    assert done.returncode == 0 and ckpt.exists(), done.stdout[-3000:] + done.stderr[-3000:] + deployment.tail()
    assert_matches_reference(strategy, ckpt, json.loads(result.read_text())["events"])


def wait_file(path: Path, deployment: Deployment, timeout: float = DEADLINE) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} never came:\n{deployment.tail()}"
        time.sleep(0.2)


class GoneInRound:
    """The in-process twin of a node that left for one round: it sends nothing in that round."""

    def __init__(self, inner, round: int) -> None:
        self.inner, self.round = inner, round

    def request(self, round: int, seed: int):
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int):
        return None if round == self.round else self.inner.update(download, round, seed)


@pytest.mark.deployment
def test_nodes_come_and_go_and_a_killed_serverapp_resumes(deployment):
    """Over TLS with SuperNode authentication and clients tied to keys: the node holding client 1's
    claim under another key is refused (recorded, the run goes on); client 2's node stops after
    round 0 and is recorded "gone" in round 1; it restarts (same key, same node id) and serves
    again; the ServerApp is SIGKILLed after round 1 and a new run resumes from the checkpoint at
    round 2. The final state equals the in-process run in which client 2 sent nothing in round 1."""
    d = deployment
    tmp = d.tmp / "scenario"
    barrier = tmp / "barrier"
    barrier.mkdir(parents=True)
    ckpt, result = tmp / "run.ckpt", tmp / "result.json"
    extra = {
        "clients-per-round": str(NUM_CLIENTS),
        "drill": "''",
        "partition-keys": f"'{d.partition_keys}'",
        "result-file": f"'{result}'",
        "barrier-dir": f"'{barrier}'",
    }
    submitted = d.run("fedavg", ckpt, stream=False, **extra)
    assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
    wait_file(barrier / "done-0", d)
    d.stop_node(2)
    d.wait_online(NUM_CLIENTS)  # nodes 0, 1 and the refused one
    (barrier / "go-0").write_text("")
    wait_file(barrier / "done-1", d)
    first = json.loads(result.read_text())
    d.start_node(2)
    d.wait_online(NUM_CLIENTS + 1)
    os.kill(int((barrier / "pid").read_text()), signal.SIGKILL)  # the ServerApp, waiting after round 1

    done = d.run("fedavg", ckpt, **{**extra, "barrier-dir": "''"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + d.tail()
    second = json.loads(result.read_text())

    cfg = run_config(ROUNDS, NUM_CLIENTS, SEED)
    clients = [client_data(i, NUM_CLIENTS) for i in range(NUM_CLIENTS)]
    ref = Server(
        make_strategy("fedavg"),
        clients,
        NUM_FEATURES,
        NUM_CLASSES,
        cfg,
        client_wrapper=lambda cid, inner: GoneInRound(inner, 1) if cid == 2 else inner,
    )
    ref.run()
    state, meta = load_checkpoint(ckpt, ref.state)
    assert meta["round"] == ROUNDS and all(torch.equal(state[k], ref.state[k]) for k in ref.state)
    assert [h["failed"] for h in meta["history"]] == [[], [[2, "gone (node left)"]], []]
    assert [[c for c, _ in h.failed] for h in ref.history] == [[], [2], []]
    kinds = [(e["kind"], e["client"]) for e in first["events"]]
    assert ("refused", 1) in kinds and ("left", 2) in kinds
    refused = next(e for e in first["events"] if e["kind"] == "refused")
    assert refused["reason"] == "its key is not the one registered for client 1"
    assert second["resumed_from"] == 2 and second["rounds"] == ROUNDS
    assert sorted(e["client"] for e in second["events"] if e["kind"] == "joined") == [0, 1, 2]


def rounds_done(result: Path) -> int:
    try:
        return int(json.loads(result.read_text())["rounds"])
    except (OSError, ValueError, KeyError):  # not there yet, or caught mid-write
        return 0


class LeaveAt:
    """The in-process twin of a node stopped after its masked upload in ``round``: it never answers
    again (its unmask message, and everything of later rounds)."""

    def __init__(self, inner, round: int) -> None:
        self.inner, self.round = inner, round

    def handle(self, kind: str, round: int, seed: int, message: bytes) -> bytes:
        if (round == self.round and kind == "upd/unmask") or round > self.round:
            raise ConnectionError("gone")
        return self.inner.handle(kind, round, seed, message)


def test_secure_aggregation_survives_killed_supernodes(deployment):
    """SecAgg+ over the authenticated deployment, every client every round (5 clients: two more
    nodes with freshly registered keys serve clients 3 and 4). Round 0 (5 participants: every other
    client a neighbour, threshold 2): client 4's SuperNode is stopped after it uploaded its masked
    input; the server sees it gone, rebuilds its self-mask seed from its neighbours' Shamir shares and
    gets the sum of all 5 inputs (client 4 is summed, so not failed). Round 1 (4 participants: 3
    neighbours each, threshold 2): clients 2 and 3 are stopped after their masked upload, leaving
    clients 0 and 1 one answering holder each: the round is refused with the reason and the state kept.
    The checkpoint equals the in-process PrivateServer twin bit for bit, and the plain run of
    round 0 within the fixed-point error."""
    from fedkernels.fl.privacy import PrivacyConfig, PrivateServer

    d, n = deployment, NUM_CLIENTS + 2
    tmp = d.tmp / "secagg"
    barrier = tmp / "barrier"
    barrier.mkdir(parents=True)
    ckpt = tmp / "run.ckpt"
    extra = {i: d.add_key() for i in (3, 4)}  # client -> node index
    for cid, i in extra.items():
        d.start_node(i, cid, n)
    node_of = {0: 0, 1: 1, 2: 2, **extra}
    try:
        d.wait_online(NUM_CLIENTS + 1 + len(extra))
        keys = {
            "num-clients": str(n),
            "clients-per-round": str(n),
            "rounds": "2",
            "drill": "''",
            "secagg": "true",
            "stage-barrier": f"'{barrier}'",
            "timeout": "60",
            "result-file": f"'{tmp / 'result.json'}'",
        }
        submitted = d.run("fedavg", ckpt, stream=False, **keys)
        assert submitted.returncode == 0, submitted.stdout[-2000:] + submitted.stderr[-2000:]
        online = NUM_CLIENTS + 1 + len(extra)
        for rnd, leaving in ((0, [4]), (1, [2, 3])):
            wait_file(barrier / f"masked-{rnd}", d)
            for cid in leaving:  # SIGTERM: the SuperNode leaves the SuperLink, as a node that shuts down
                d.stop_node(node_of[cid])
            online -= len(leaving)
            d.wait_online(online)
            (barrier / f"go-masked-{rnd}").write_text("")
        end = time.monotonic() + DEADLINE
        while rounds_done(tmp / "result.json") < 2:  # written after each round's checkpoint
            assert time.monotonic() < end, d.tail()
            time.sleep(0.5)
    finally:
        if 2 not in d.nodes:  # the other tests use client 2's node
            d.start_node(2)
            d.wait_online(NUM_CLIENTS + 1)

    clients = [client_data(i, n) for i in range(n)]
    cfg = run_config(2, n, SEED)
    twin = PrivateServer(
        make_strategy("fedavg"),
        clients,
        NUM_FEATURES,
        NUM_CLASSES,
        cfg,
        PrivacyConfig(secagg=True),
        client_wrapper=lambda c, e: LeaveAt(e, 0 if c == 4 else 1) if c in (2, 3, 4) else e,
    )
    twin.run()
    state, meta = load_checkpoint(ckpt, twin.state)
    assert all(torch.equal(state[k], twin.state[k]) for k in twin.state)
    h0, h1 = meta["history"]
    assert h0["failed"] == [] and h0["privacy"]["survivors"] == 5 and h0["skipped"] == ""
    assert [c for c, _ in h1["failed"]] == [2, 3, 4] and "cannot unmask" in h1["skipped"]
    assert [h["privacy"] for h in meta["history"]] == [h.privacy for h in twin.history]
    assert [(h["bytes_up"], h["bytes_down"]) for h in meta["history"]] == [
        (h.bytes_up, h.bytes_down) for h in twin.history
    ]
    plain = Server(make_strategy("fedavg"), clients, NUM_FEATURES, NUM_CLASSES, run_config(1, n, SEED))
    plain.run()
    assert all(torch.allclose(state[k], v, atol=2e-5, rtol=0) for k, v in plain.state.items())
