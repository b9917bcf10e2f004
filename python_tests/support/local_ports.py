"""Loopback helpers for tests that start servers as child processes: a free port, waiting for a
listener, and the tail of the children's logs for a failure message."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (the socket is closed again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, describe: Callable[[], str], timeout: float = 120.0) -> None:
    """Block until something accepts connections on 127.0.0.1:``port`` (``flwr run`` does not retry).

    Raises:
        RuntimeError: nothing listened within ``timeout`` seconds; the message ends with ``describe()``.
    """
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listened on 127.0.0.1:{port} within {timeout} s:\n{describe()}")


def log_tails(folder: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of every ``*.log`` in ``folder``, each under its name."""
    return "\n".join(f"--- {f.name}\n" + f.read_text()[-chars:] for f in sorted(folder.glob("*.log")))
