"""CPU time and peak memory of a process tree (this process and every descendant, e.g. Ray's
workers and raylet), sampled from /proc by a background thread.

Linux only. The sums are lower bounds: a process that lives shorter than the sampling period is
missed, and one's last fraction of a period before it exits is lost.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> tuple[int, float, int] | None:
    """(parent pid, user+system CPU seconds, resident bytes) of ``pid``, or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # after "pid (comm) "
    ppid, utime, stime, rss = int(fields[1]), int(fields[11]), int(fields[12]), int(fields[21])
    return ppid, (utime + stime) / _TICK, rss * _PAGE


def descendants(root: int) -> dict[int, tuple[float, int]]:
    """Every live process under ``root`` (included): pid -> (CPU seconds, resident bytes)."""
    info = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _stat(int(entry))
            if got is not None:
                info[int(entry)] = got
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in info.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in info:
            out[pid] = (info[pid][1], info[pid][2])
            todo.extend(children.get(pid, []))
    return out


class TreeMonitor:
    """Samples the tree under this process every ``period`` seconds while running (a context manager).

    Attributes:
        cpu_seconds: CPU seconds of the tree since start (each process's last sample, summed).
        peak_rss_bytes: the largest summed resident memory of the tree seen at one sample.
    """

    def __init__(self, period: float = 0.5) -> None:
        self.period, self.root = period, os.getpid()
        self._cpu: dict[int, float] = {}
        self._base: dict[int, float] = {}
        self.peak_rss_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-monitor", daemon=True)

    def __enter__(self) -> TreeMonitor:
        self._base = {pid: cpu for pid, (cpu, _) in descendants(self.root).items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        tree = descendants(self.root)
        for pid, (cpu, _) in tree.items():
            self._cpu[pid] = cpu - self._base.get(pid, 0.0)
        self.peak_rss_bytes = max(self.peak_rss_bytes, sum(rss for _, rss in tree.values()))

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    @property
    def cpu_seconds(self) -> float:
        return sum(self._cpu.values())
