"""Partial weight exchange in the federated loop: a client sends only the ``ceil(p * M)`` tensors of
its model that changed most; the server averages each tensor over the clients that sent it.

Candidates are the floating-point entries of a ``state_dict``, in its order; other entries (e.g.
BatchNorm's ``num_batches_tracked``) are never sent. Both helpers run the compiled kernels
(``select_topk_tensors`` and ``masked_weighted_average``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from ..ops.select import delta_norms, masked_weighted_average, num_selected, select_topk_tensors

DRIFTS = ("norm", "rms", "numel")

PartialPayload = dict  # {"indices": int64 [k], "tensors": {name: Tensor}} (see make_partial_payload)


def candidate_names(state: Mapping[str, torch.Tensor]) -> list[str]:
    """The state_dict entries that take part in the exchange: floating-point tensors, in order."""
    return [name for name, t in state.items() if t.is_floating_point()]


def make_partial_payload(
    before: Mapping[str, torch.Tensor],
    after: Mapping[str, torch.Tensor],
    fraction: float,
    normalize: bool = False,
    *,
    drift: str | None = None,
    threshold: float | None = None,
) -> PartialPayload:
    """What a client sends: the tensors of ``after`` whose change since ``before`` is largest.

    Args:
        before, after: state_dicts of the same model (same names, shapes, dtypes, device); tensors
            are matched by name, candidates taken in ``after``'s order.
        fraction: p in ``(0, 1]``; ``k = ceil(p * M)`` of the M candidate tensors are sent.
        normalize: rank by RMS change (norm / sqrt(numel)) instead of the plain norm.
        drift: how a tensor's change is measured, overriding ``normalize``: ``"norm"`` (``||d||``),
            ``"rms"`` (``||d|| / sqrt(numel)``) or ``"numel"`` (``||d|| / numel``, FL4Health's
            normalised drift).
        threshold: if given, send every tensor whose drift exceeds it (theta selection, any number
            of tensors, possibly none) instead of the top ``fraction``.

    Returns:
        ``{"indices": int64 [k] (positions among candidate_names(after), descending change),
        "tensors": {name: after[name]}}`` in the same order (detached, not copied).

    Example:
        >>> payload = make_partial_payload(global_state, model.state_dict(), fraction=0.1)
        >>> list(payload["tensors"])   # e.g. ['layer4.2.conv3.weight', 'fc.weight', ...]
    """
    names = candidate_names(after)
    if set(names) != set(candidate_names(before)):  # by name: deserialised dicts may be reordered
        raise ValueError("before and after must have the same floating-point entries")
    new = [after[n].detach() for n in names]
    old = [before[n].detach() for n in names]
    drift = drift or ("rms" if normalize else "norm")
    if drift not in DRIFTS:
        raise ValueError(f"drift must be one of {DRIFTS}, got {drift!r}")
    if threshold is None and drift != "numel":
        idx = select_topk_tensors(new, old, fraction, normalize=drift == "rms")
    else:
        score = delta_norms(new, old, normalize=drift == "rms")
        if drift == "numel":
            score = score / torch.tensor([max(1, t.numel()) for t in new], dtype=torch.float32, device=score.device)
        if threshold is not None:
            idx = torch.nonzero(score > threshold).reshape(-1)
            idx = idx[torch.sort(score[idx], descending=True, stable=True).indices]
        else:
            idx = torch.sort(score, descending=True, stable=True).indices[: num_selected(len(names), fraction)]
    chosen = idx.tolist()
    return {"indices": idx, "tensors": {names[i]: new[i] for i in chosen}}


def apply_partial_payloads(state: Mapping[str, torch.Tensor], payloads: list[tuple[PartialPayload, float]]) -> None:
    """Server side, in place: each tensor of ``state`` becomes the weighted average over the clients
    that sent it (weights e.g. their sample counts); tensors nobody sent keep their value.

    Args:
        state: the global state_dict (its tensors are updated in place).
        payloads: ``(payload, weight)`` per client; payloads from ``make_partial_payload``. Tensors
            are matched by name, so a payload's ``"indices"`` are informational here.

    Example:
        >>> apply_partial_payloads(global_state, [(p1, 120.0), (p2, 80.0)])
    """
    names = candidate_names(state)
    position = {n: i for i, n in enumerate(names)}
    sent = []
    for c, (payload, weight) in enumerate(payloads):
        tensors = payload["tensors"]
        unknown = [n for n in tensors if n not in position]
        if unknown:
            raise ValueError(f"payload {c} sends tensors that are not floating-point entries of state: {unknown}")
        idx = torch.tensor([position[n] for n in tensors], dtype=torch.int64, device="cpu")
        sent.append((idx, list(tensors.values()), float(weight)))
    with torch.no_grad():
        masked_weighted_average([state[n] for n in names], sent)
