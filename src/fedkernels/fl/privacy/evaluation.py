"""Federated evaluation under secure aggregation: the server learns the example-weighted metric
means of the evaluating clients, never one client's report or held-out count.

Each evaluating client ranks its own held-out rows as in plain federated evaluation
(:func:`fedkernels.fl.evaluation.client_evaluation`), turns its report into ``a (m_1, ..., m_M, 1)``
with ``a`` its weight (:func:`~.client.client_weight` of its held-out count under the public cap),
and the ``evl`` SecAgg+ session sums those vectors: metric ``j`` is ``sum_i a_i m_ij / sum_i a_i``,
the plain example-weighted mean whenever no client holds more held-out rows than the cap.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .. import evaluation as ev
from .. import payload as pl
from ..round import failure_reason
from .client import ACK, EVAL, EVAL_CTL, EVAL_KS
from .ring import RingCodec
from .session import Exchange, Tally, secure_sum

ACK_SPEC = pl.PayloadSpec({ACK: pl.TensorSpec(torch.uint8, (1,))})


def private_evaluation(
    download: pl.Payload,
    clients: list[int],
    ks: tuple[int, ...],
    propensity: bool,
    exchange: Exchange,
    graph: Callable[[int], tuple[int, int]],
    run_seed: int,
    round: int,
    bits: int,
    cap: float,
) -> tuple[dict[str, float], dict[int, str], str]:
    """One federated evaluation of ``clients`` summed by SecAgg+.

    Args:
        download: the evaluation payload (:func:`fedkernels.fl.evaluation.evaluation_payload`).
        clients: the evaluating clients, ascending.
        ks: the ks every report holds; ``propensity``: whether ``download`` carries propensities.
        exchange, graph, run_seed, round, bits: as for :func:`~.session.secure_sum` (the session is ``evl``).
        cap: the public weight cap.

    Returns:
        ``(metrics, failed, why)``: the example-weighted means (empty when the sum could not be had,
        and ``why``), and the clients left out with their reasons.
    """
    names = ev.metric_names(ks, propensity)
    ctl = {EVAL_CTL: torch.tensor([cap], dtype=torch.float64), EVAL_KS: torch.tensor(ks, dtype=torch.int64)}
    raw = pl.encode({**download, **ctl})
    tally = Tally()
    answers = exchange(EVAL, round, dict.fromkeys(clients, raw), ACK_SPEC.byte_limit())
    live = []
    for c in clients:
        ans = answers.get(c, TimeoutError("timed out (no reply)"))
        try:
            if isinstance(ans, BaseException):
                raise ans
            if not ans:
                raise ValueError("sent nothing")
            pl.decode(ans, ACK_SPEC)
            live.append(c)
        except Exception as e:  # this client's failure only
            tally.failed[c] = failure_reason(e)
    if len(live) < 2:
        return {}, tally.failed, "secure aggregation needs at least 2 evaluating clients"
    layout: dict[str, tuple[int, ...]] = {"report": (len(names) + 1,)}
    sums, summed, why = secure_sum(graph, exchange, "evl", run_seed, round, live, layout, bits, 1.0, tally)
    if sums is None:
        return {}, tally.failed, why
    report = sums["report"]
    total, tol = float(report[-1]), RingCodec(bits, len(live), 1.0).error_bound(len(summed))
    if total <= tol:
        return {}, tally.failed, "no evaluating client holds a held-out example"
    if bool(((report[:-1] < -tol) | (report[:-1] > total + tol)).any()):
        return (
            {},
            tally.failed,
            "a summed metric lies outside [0, the summed weight]: a client sent a report out of range",
        )
    return {n: float(v) / total for n, v in zip(names, report[:-1].tolist(), strict=True)}, tally.failed, ""
