"""A slow, obvious DP-FTRL tree: the dyadic cover of a prefix by greedy steps, and the prefix noise as
the sum of its nodes, for tests of fedkernels.fl.privacy.ftrl."""

from __future__ import annotations


def dyadic_cover(j: int) -> list[tuple[int, int]]:
    """Nodes ``(level, start)`` covering ``[0, j)``: from 0, the largest aligned block that still fits."""
    out, at = [], 0
    while at < j:
        level = 0
        while at % (2 ** (level + 1)) == 0 and at + 2 ** (level + 1) <= j:
            level += 1
        out.append((level, at))
        at += 2**level
    return out


def prefix_noise(node_value, j: int):
    """The noise of the prefix sum after ``j`` rounds: the sum of ``node_value(node)`` over the cover."""
    total = None
    for node in dyadic_cover(j):
        v = node_value(node)
        total = v if total is None else {k: total[k] + v[k] for k in v}
    return total
