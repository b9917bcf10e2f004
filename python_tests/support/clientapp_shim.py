"""The ``flwr-clientapp`` a warm deployment puts first on its SuperNodes' PATH (stdlib only: it runs
as ``python -IS``). It hands its arguments, environment, working folder and standard streams to the
warm parent named by ``FK_WARM_CLIENTAPP`` (:mod:`python_tests.support.warm_clientapp`), which forks
the real ``flwr-clientapp`` entry point in a child process; it forwards SIGTERM/SIGINT to that child
and exits with its exit code, so the SuperNode's SuperExec sees an ordinary process."""

import contextlib
import json
import os
import signal
import socket
import sys


def main() -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["FK_WARM_CLIENTAPP"])
    request = {"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd()}
    socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    replies = conn.makefile("r")
    child = int(json.loads(replies.readline())["pid"])

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    line = replies.readline()
    return int(json.loads(line)["exit"]) if line else 1


if __name__ == "__main__":
    sys.exit(main())
