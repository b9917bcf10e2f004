"""Opening files a user or a peer hands us: regular files only, refused by type before any read.

A path may name a FIFO (reading it blocks until someone writes: a hang), a character device
(``/dev/zero`` never ends: memory grows until the process dies), a directory (``IsADirectoryError``
deep inside a reader) or a socket. :func:`open_regular` refuses all of them with a ``ValueError``
naming the path. It checks the type twice: ``os.stat`` before opening (so nothing is opened at all
in the common case), and ``os.fstat`` of the descriptor it opened with ``O_NONBLOCK`` (so a file
swapped for a FIFO between the two is still refused, and the open itself cannot block).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: str | Path, what: str = "file") -> os.stat_result:
    """``os.stat(path)`` if ``path`` is a regular file (symlinks followed).

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: ``path`` is a directory, FIFO, device or socket (the message names it and ``what``).
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file")
    return st


def open_regular(path: str | Path, what: str = "file") -> BinaryIO:
    """Open ``path`` for binary reading if, and only if, it is a regular file (see the module doc).

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: not a regular file (the message names the path, ``what`` it was meant to be and its kind).
    """
    check_regular(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped after the first check
            raise ValueError(f"{what} {path} is {_kind(st.st_mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, refused before reading if it holds more than ``max_bytes``.

    A file that grows while it is read is cut at ``max_bytes + 1`` bytes and refused, so memory
    stays bounded by ``max_bytes`` whatever the file does.

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: not a regular file, or larger than ``max_bytes`` (the message names the path).
    """
    with open_regular(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise ValueError(f"{what} {path} has {size} bytes, more than the {max_bytes} it may have")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{what} {path} grew past {max_bytes} bytes while it was read")
    return data
