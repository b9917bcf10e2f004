"""The memory this process can still use, for checks that refuse work the machine cannot hold
before any of it is allocated (run settings, models, data files)."""

from __future__ import annotations

import os
from pathlib import Path


def available_memory() -> int:
    """Bytes of memory this process can still use: ``MemAvailable`` (Linux), lowered to the cgroup's
    limit where one is set; the physical memory elsewhere."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            avail = 1 << 34
    for cg in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(cg).read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            avail = min(avail, int(raw))
    return avail
