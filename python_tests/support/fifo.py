"""A FIFO unblocker for tests of readers that must refuse a FIFO without opening it: whether a reader
ever opened the FIFO is read from the FIFO itself, never from a clock."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from types import TracebackType


class FifoReleaser:
    """Opens the write end of ``path`` (non-blocking) after ``seconds``, so a reader blocked on the FIFO
    gets EOF and the test fails on its assertions instead of hanging.

    The non-blocking open succeeds only while some reader has the FIFO open (or waits in ``open``),
    so :attr:`found_a_reader` tells whether the code under test opened it, however slow the machine:
    a refusal by type never opens it, and a reader that does open it blocks until this releases it.

    Use as a context manager around the call; on exit the timer is cancelled and joined, so
    :attr:`found_a_reader` is final when read after the ``with``. A path that is not a FIFO (a device,
    a folder) is left alone: it stays ``False``.
    """

    def __init__(self, path: str | Path, seconds: float = 3.0) -> None:
        self.path = path
        self.found_a_reader = False
        self._timer = threading.Timer(seconds, self._release)

    def _release(self) -> None:
        if not stat.S_ISFIFO(os.stat(self.path).st_mode):
            return  # opening /dev/zero for writing would succeed and mean nothing
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # ENXIO: nobody has the FIFO open for reading
        os.close(fd)
        self.found_a_reader = True

    def __enter__(self) -> FifoReleaser:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._timer.cancel()
        self._timer.join()
