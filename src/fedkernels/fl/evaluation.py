"""Federated evaluation, whatever carries the bytes: each client ranks its own held-out data under the
global model and reports P@k, nDCG@k and R@k (with PSP@k and PSnDCG@k when the server sends inverse
propensities) with its example count; the server weighs them by examples.

The in-process :class:`fedkernels.fl.Server` (``evaluate_federated``) and the Flower adapter
(``configure_evaluate``/``aggregate_evaluate``) both send :func:`evaluation_download`, run
:func:`client_evaluation` on the client and fold the replies with :func:`aggregate_evaluation`, so
both transports give the same numbers. The server never sees a held-out example, only each
client's metric means and example count; a report that fails its spec, holds a metric outside
[0, 1] or is missing leaves that client out (recorded, never an abort).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..metrics import ranking_metrics
from . import payload as pl
from .device import to_device
from .round import Answer, ClientSentNothing, failure_reason
from .seeding import numpy_rng
from .strategy import SERVER, State, Strategy
from .types import ClientData

MAX_EXAMPLES = 2**40  # a larger claimed count is rejected (it would only buy a client more weight)


INV_PROPENSITY = "eval.inv_propensity"  # download entry: float64 [p] inverse propensities (optional)


def metric_names(ks: tuple[int, ...], propensity: bool = False) -> list[str]:
    """The reported metrics, in wire order: for each k ``P@k``, ``nDCG@k``, ``R@k`` and, with
    propensities, ``PSP@k`` and ``PSnDCG@k``."""
    fams = ("P", "nDCG", "R", "PSP", "PSnDCG") if propensity else ("P", "nDCG", "R")
    return [f"{m}@{k}" for k in ks for m in fams]


def evaluation_ks(ks: tuple[int, ...], num_classes: int) -> tuple[int, ...]:
    """The ks a model of ``num_classes`` classes can be ranked at (sorted, unique)."""
    return tuple(sorted({int(k) for k in ks if 1 <= int(k) <= num_classes}))


def evaluation_payload(state: State, inv_propensity: torch.Tensor | None = None) -> pl.Payload:
    """What the server sends each evaluating client: the global state less the server-only entries
    (``SERVER`` prefix); with ``inv_propensity`` (float ``[p]``, from the training label counts) also
    that, so the clients report PSP@k and PSnDCG@k."""
    down = {n: t for n, t in state.items() if not n.startswith(SERVER)}
    if inv_propensity is not None:
        down[INV_PROPENSITY] = torch.as_tensor(inv_propensity, dtype=torch.float64, device="cpu").contiguous()
    return down


def evaluation_download(state: State, inv_propensity: torch.Tensor | None = None) -> bytes:
    """:func:`evaluation_payload`, serialised."""
    return pl.encode(evaluation_payload(state, inv_propensity))


def evaluation_clients(seed: int, round: int, num_clients: int, per_round: int | None) -> list[int]:
    """The clients that evaluate after ``round`` (0-based): all of them when ``per_round`` is None
    or at least ``num_clients``, else a seeded sample of ``per_round`` without replacement (its own
    stream, independent of the training selection), ascending."""
    if per_round is None or per_round >= num_clients:
        return list(range(num_clients))
    if per_round < 1:
        raise ValueError(f"eval_clients must be >= 1 or None, got {per_round}")
    rng = numpy_rng(seed, "evaluate", round)
    return sorted(int(c) for c in rng.choice(num_clients, size=per_round, replace=False))


def client_evaluation(
    strategy: Strategy, download: bytes, data: ClientData, ks: tuple[int, ...], device: torch.device | str = "cpu"
) -> bytes:
    """Client side: rank ``data`` (the client's held-out set) under the downloaded global state, on ``device``.

    Returns:
        The serialised report: ``metrics`` float64 ``[len(metric_names(ks, propensity))]`` (means over
        this client's examples, in :func:`metric_names` order; zeros when it holds none) and
        ``num_examples`` int64 ``[1]``. ``propensity``: whether the download carries inverse propensities.
    """
    device = torch.device(device)
    state = to_device(pl.decode(download), device)
    inv_p = state.pop(INV_PROPENSITY, None)
    inv_p = None if inv_p is None else inv_p.cpu()
    names = metric_names(ks, inv_p is not None)
    values = [0.0] * len(names)
    if len(data) and ks:
        topk = strategy.predict_topk(state, data.x.to(device), max(ks)).cpu()
        got = ranking_metrics(topk, data.indptr.cpu(), data.indices.cpu(), ks, inv_propensity=inv_p)
        values = [got[name] for name in names]
    report = {
        "metrics": torch.tensor(values, dtype=torch.float64, device="cpu"),
        "num_examples": torch.tensor([len(data)], dtype=torch.int64, device="cpu"),
    }
    return pl.encode(report)


def evaluation_spec(ks: tuple[int, ...], propensity: bool = False) -> pl.PayloadSpec:
    """What a well-formed evaluation report looks like (``propensity``: the download carried them)."""
    n = len(metric_names(ks, propensity))
    return pl.PayloadSpec(
        {
            "metrics": pl.TensorSpec(torch.float64, (n,)),
            "num_examples": pl.TensorSpec(torch.int64, (1,), min_value=0, max_value=MAX_EXAMPLES),
        },
        max_bytes=1024 + 8 * n,
    )


def aggregate_evaluation(
    reports: Mapping[int, Answer], ks: tuple[int, ...], propensity: bool = False
) -> tuple[dict[str, float], dict[int, str], int]:
    """Server side: the example-weighted means of the clients' reports.

    Args:
        reports: client -> its raw report (or ``None``/an exception: it failed).
        ks: the ks every report holds (see :func:`evaluation_ks`).
        propensity: the download carried inverse propensities (the reports hold PSP@k, PSnDCG@k).

    Returns:
        ``(metrics, failed, num_examples)``: ``metrics[name] = sum_i n_i m_i / sum_i n_i`` over the
        accepted reports (empty when they hold no examples), the failures (client -> reason), and
        the examples counted. Sums run in float64 in ascending client id.
    """
    spec, names = evaluation_spec(ks, propensity), metric_names(ks, propensity)
    sums, total, failed = [0.0] * len(names), 0, {}
    for c in sorted(reports):
        answer = reports[c]
        try:
            if isinstance(answer, BaseException):
                raise answer
            if not answer:
                raise ClientSentNothing("sent no evaluation")
            rep = pl.decode(answer, spec)
            values, n = rep["metrics"].tolist(), int(rep["num_examples"][0])
            if not all(0.0 <= v <= 1.0 for v in values):
                raise pl.PayloadError("evaluation metrics must lie in [0, 1]")
        except Exception as e:  # a client's failure or a malformed report: this client only
            failed[c] = failure_reason(e)
            continue
        total += n
        sums = [s + n * v for s, v in zip(sums, values, strict=True)]
    metrics = {name: s / total for name, s in zip(names, sums, strict=True)} if total else {}
    return metrics, failed, total
