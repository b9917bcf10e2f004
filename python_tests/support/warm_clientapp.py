"""A warm parent for the deployment tests' ClientApp processes.

Flower's SuperNode runs each message's ClientApp in a new ``flwr-clientapp`` process, and each one
imports flwr, torch and fedkernels before it reads its message: seconds of CPU per message, which made
the deployment tests minutes long. :func:`start` starts one parent process that imports those once and
puts a ``flwr-clientapp`` shim (:mod:`.clientapp_shim`) first on the PATH the SuperNodes get: each
message's ClientApp then runs in a child *forked* from that parent (its own process, its own standard
streams, environment and working folder, the stock ``flwr-clientapp`` entry point and its exit code),
without the imports. What the deployment tests test (separate processes, TLS, node keys, nodes that
stop) is unchanged.

The parent creates no thread pool, gRPC channel or torch tensor before it forks (a fork copies only the
forking thread), so the child starts as clean as a new process would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

SHIM = Path(__file__).with_name("clientapp_shim.py")
# What every ClientApp of the test apps imports: flwr's entry point, torch, fedkernels' Flower layer
# and SecAgg (the private test runs), the test apps' shared data helpers.
WARM_MODULES = (
    "flwr.supernode.cli.flwr_clientapp",
    "flwr.clientapp",
    "torch",
    "fedkernels.integrations.flower",
    "fedkernels.fl.privacy",
    "python_tests.support.flower_runs",
)


def start(folder: Path, env: dict[str, str], timeout: float = 120.0) -> tuple[subprocess.Popen, dict[str, str]]:
    """Start the warm parent (its log: ``folder/warm-clientapp.log``) with ``env`` and write the shim to
    ``folder/warm-bin/flwr-clientapp``.

    Returns:
        The parent process (in its own process group: kill the group to stop it) and ``env`` with the
        shim's folder first on PATH and ``FK_WARM_CLIENTAPP`` naming the parent's socket: the
        environment to start SuperNodes with.

    Raises:
        RuntimeError: the parent did not listen within ``timeout`` seconds (its log in the message).
    """
    bin_dir = folder / "warm-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "flwr-clientapp"
    shim.write_text(f"#!{sys.executable} -IS\n" + SHIM.read_text())
    shim.chmod(0o755)
    address = str(folder / "warm-clientapp.sock")
    log_path = folder / "warm-clientapp.log"
    with open(log_path, "a") as log:
        parent = subprocess.Popen(
            [sys.executable, "-m", "python_tests.support.warm_clientapp", address],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    end = time.monotonic() + timeout
    while not os.path.exists(address):
        if parent.poll() is not None or time.monotonic() > end:
            parent.kill()
            raise RuntimeError(f"the warm ClientApp parent did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.1)
    warm_env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "FK_WARM_CLIENTAPP": address}
    return parent, warm_env


def _run_child(request: dict, fds: list[int]) -> None:
    """In the forked child: become the requested ``flwr-clientapp`` process and run it; never returns."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["flwr-clientapp", *request["argv"][1:]]
        from flwr.supernode.cli.flwr_clientapp import flwr_clientapp

        flwr_clientapp()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # the child's own failure: reported on its stderr, as a process would
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The shim's request line and its three standard streams (sent with the line's first bytes); on a
    broken request the descriptors received are closed before the error is raised."""
    message, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    try:
        if len(fds) != 3:
            raise ConnectionError(f"the shim sent {len(fds)} file descriptors, not its 3 standard streams")
        while not message.endswith(b"\n"):
            more = conn.recv(1 << 16)
            if not more:
                raise ConnectionError("the shim closed its connection mid-request")
            message += more
        return json.loads(message.decode()), list(fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _serve(conn: socket.socket, listener: socket.socket, open_conns: set[socket.socket]) -> None:
    request, fds = _read_request(conn)
    pid = os.fork()
    if pid == 0:
        listener.close()
        conn.close()
        for other in list(open_conns):  # other children's shims: not this child's to hold
            other.close()
        _run_child(request, fds)
    for fd in fds:
        os.close(fd)
    print(f"forked ClientApp {pid}: {' '.join(request['argv'][1:3])}", flush=True)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")

    def reap() -> None:
        _, status = os.waitpid(pid, 0)
        with contextlib.suppress(OSError):  # the shim is gone (its SuperNode was stopped)
            conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        open_conns.discard(conn)
        conn.close()

    open_conns.add(conn)
    threading.Thread(target=reap, daemon=True).start()


def main(address: str) -> None:
    """Import :data:`WARM_MODULES`, then fork a ClientApp child for every shim that connects to ``address``."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".tmp")
    listener.listen(64)
    os.rename(address + ".tmp", address)  # the path appears only once it accepts connections
    print(f"warm ClientApp parent {os.getpid()} listening on {address}", flush=True)
    open_conns: set[socket.socket] = set()
    while True:
        conn, _ = listener.accept()
        try:
            _serve(conn, listener, open_conns)
        except (OSError, ValueError) as bad:  # one broken request must not stop the others
            print(f"warm ClientApp parent: request refused: {bad}", flush=True)
            conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
