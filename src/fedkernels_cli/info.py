"""``fedkernels info``: the build facts and the registered algorithms."""

from __future__ import annotations

import argparse


def cmd_info(args: argparse.Namespace) -> int:
    """Print the build facts and the registered algorithms."""
    from fedkernels._info import info
    from fedkernels.fl.registry import strategies

    print(info())
    print("algorithms: " + ", ".join(c.name for c in strategies().values()))
    return 0
