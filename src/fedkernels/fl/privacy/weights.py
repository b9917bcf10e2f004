"""The server's check of the weights inside a weighted secure sum.

Under secure aggregation without DP each client weighs its contribution by
:func:`~.client.client_weight` of its own example count, ``min(examples, cap) / cap``, and the weight
travels masked with the contribution (``__weight``, and per row ``__row_count`` or per tensor
``__count``), so the server never sees a count: per-row weight sums cannot be split into the
clients that make them up. The server cannot check one client's weight, but every honest weight is 0
(no example) or lies in ``[1 / cap, 1]``, and a row's or a tensor's weight is a sum of some of them:
a sum outside those ranges, or a total weight of 0, refuses the round with the reason instead of
dividing by it.
"""

from __future__ import annotations

import torch

from .forms import COUNT, ROW_COUNT, WEIGHT


def check_weight_sums(sums: dict[str, torch.Tensor], summed: int, cap: float, tolerance: float) -> str:
    """Why the weights in ``sums`` cannot come from ``summed`` clients weighing themselves honestly
    (empty when they can).

    Args:
        sums: the decoded sums of a weighted round (``__weight`` float64 ``[1]``; ``__row_count``
            ``[|U|]`` or ``__count`` ``[M]`` where the form has them).
        summed: how many clients' contributions are in the sums.
        cap: the public weight cap (examples at which a client's weight reaches 1).
        tolerance: the decoding error of one summed value (the ring's fixed point).
    """
    one = 1.0 / cap
    total = float(sums[WEIGHT][0]) if WEIGHT in sums else None
    if total is not None:
        if abs(total) <= tolerance:
            return (
                "the summed weight is 0: no summed client holds an example, or a client tampered with its "
                "weight (round not applied)"
            )
        if not one - tolerance <= total <= summed + tolerance:
            return (
                f"the summed weight {total:.6g} of {summed} clients lies outside [{one:.6g}, {summed}] (a client "
                "tampered with its weight; round not applied)"
            )
    for name in (ROW_COUNT, COUNT):
        if name not in sums:
            continue
        part = sums[name].double()
        top = (total if total is not None else float(summed)) + tolerance
        bad = (part < -tolerance) | (part > top) | ((part > tolerance) & (part < one - tolerance))
        if bool(bad.any()):
            at = int(bad.nonzero()[0, 0])
            return (
                f"the summed weight {float(part[at]):.6g} of entry {at} of {name} is no sum of client weights "
                f"(0, or between {one:.6g} and {top:.6g}): a client tampered with its weights; round not applied"
            )
    return ""
