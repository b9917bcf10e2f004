"""One SecAgg+ session over any transport: the server side of :mod:`.secagg` driven message by message,
with the session's public header and the record of who was summed, who was left out and why.

A private round (:func:`~.server.private_round`) runs one session per sum it needs (``req``: the
private request union, ``upd``: the update, ``evl``: a federated evaluation); the transport is an
``exchange(kind, round, {client: bytes}, reply_limit) -> {client: bytes or failure}``.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from .. import payload as pl
from ..round import Answer, failure_reason
from .ring import RingCodec
from .secagg import SecAggError, SecAggParams, SecAggServer

# (kind, round, {client: message}, the most bytes a well-formed reply has) -> {client: reply or failure}
Exchange = Callable[[str, int, Mapping[int, bytes], int], dict[int, Answer]]
OPTIONAL = ("seeds", "repair")  # stages run only when a client broke the protocol


@dataclass
class Tally:
    """A round's byte counts and failures. ``failed``: clients whose contribution is not in the
    round's sums (client -> why); ``faults``: clients whose contribution is in them although they sent
    a malformed SecAgg+ message afterwards (client -> what); ``contributed``: clients whose update
    reached the server (in the clear, or masked into a released sum), what DP accounting counts."""

    down: int = 0
    up: int = 0
    secagg_down: int = 0
    secagg_up: int = 0
    failed: dict[int, str] = field(default_factory=dict)
    faults: dict[int, str] = field(default_factory=dict)
    contributed: set[int] = field(default_factory=set)


def session_header(params: SecAggParams, bound: float) -> pl.Payload:
    """A session's public parameters and encoding bound: the ``advertise`` message (the same for every
    participant). The participants travel as a bitmap over client ids (one bit per client of the run:
    125 bytes at 1000 clients), so each client can recompute and check the neighbour graph."""
    member = torch.zeros(max(params.participants) + 1, dtype=torch.uint8)
    member[list(params.participants)] = 1
    return {
        "members": torch.from_numpy(np.packbits(member.numpy())),
        "config": torch.tensor(
            [params.length, params.bits, params.degree, params.threshold, params.graph_seed], dtype=torch.int64
        ),
        "session": torch.frombuffer(bytearray(params.session), dtype=torch.uint8),
        "bound": torch.tensor([bound], dtype=torch.float64),
    }


def session_params(message: pl.Payload) -> tuple[SecAggParams, float]:
    """The public session parameters and the encoding bound of an ``advertise`` message (the inverse
    of :func:`session_header`)."""
    length, bits, degree, threshold, graph_seed = (int(v) for v in message["config"].tolist())
    members = np.unpackbits(message["members"].numpy()).nonzero()[0]
    params = SecAggParams(
        tuple(int(c) for c in members),
        length,
        bits,
        degree,
        threshold,
        graph_seed,
        bytes(message["session"].numpy().tobytes()),
    )
    return params, float(message["bound"][0])


def secure_sum(
    graph: Callable[[int], tuple[int, int]],
    exchange: Exchange,
    name: str,
    run_seed: int,
    round: int,
    live: list[int],
    layout: dict[str, tuple[int, ...]],
    bits: int,
    bound: float,
    tally: Tally,
) -> tuple[dict[str, torch.Tensor] | None, list[int], str]:
    """One SecAgg+ session named ``name`` over ``live`` summing float vectors of ``layout``.

    Args:
        graph: ``n -> (k, threshold)`` for a session of n participants (raises ValueError when no
            graph is secure and correct for n: the session is then refused).
        exchange: the transport.
        run_seed, round: name the session (``f"{run_seed}/{round}/{name}"``, bound into every key).
        live: the participants, ascending.
        layout: name -> shape of the summed tensors (the same for every client).
        bits, bound: the ring Z_{2^bits} and the clamp of every value.
        tally: byte counts and failures, updated.

    Returns:
        ``(sums, summed, why)``: the decoded sums (None when the session failed, and ``why``), and the
        clients whose vectors are in them. The graph seed comes from OS randomness, never from the run
        seed: the security argument needs a graph the colluders could not know when they were chosen.
    """
    length = sum(math.prod(s) for s in layout.values())
    try:
        k, threshold = graph(len(live))
        params = SecAggParams(
            tuple(live), length, bits, k, threshold, secrets.randbits(63), f"{run_seed}/{round}/{name}".encode()
        )
        codec = RingCodec(bits, len(live), bound)
        codec.frac  # noqa: B018  (raises if the ring cannot hold this many clients at this bound)
    except ValueError as e:
        return None, [], f"secure aggregation ({name}) cannot run: {e}"
    sa = SecAggServer(params)
    raw = pl.encode(session_header(params, bound))
    why: dict[int, str] = {}
    steps: list[tuple[str, Callable[[], Mapping[int, pl.Payload | bytes]], Callable[[int, pl.Payload], None]]] = [
        ("advertise", lambda: dict.fromkeys(live, raw), sa.take_advertise),
        ("share", sa.share_messages, sa.take_shares),
        ("masked", sa.masked_messages, sa.take_masked),
        ("seeds", sa.seeds_messages, sa.take_seeds),
        ("unmask", sa.unmask_messages, sa.take_unmask),
        ("repair", sa.repair_messages, sa.take_seeds),
    ]
    try:
        for stage, messages, take in steps:
            built = messages()
            if stage in OPTIONAL and not built:
                continue
            msgs = {c: m if isinstance(m, bytes) else pl.encode(m) for c, m in built.items()}
            limit = sa.spec(stage, live[0]).byte_limit()  # the same for every client of the session
            answers = exchange(f"{name}/{stage}", round, msgs, limit)
            for c, m in msgs.items():
                tally.secagg_down += len(m)
                ans = answers.get(c, TimeoutError("timed out (no reply)"))
                if isinstance(ans, BaseException) or not ans:
                    err = ans if isinstance(ans, BaseException) else ValueError("sent nothing")
                    why.setdefault(c, f"dropped in secure aggregation ({name}, {stage}): {failure_reason(err)}")
                    continue
                tally.secagg_up += len(ans)
                try:
                    take(c, pl.decode(ans, sa.spec(stage, c)))
                except ValueError as e:  # a malformed or refused answer: this client only
                    why.setdefault(c, f"refused in secure aggregation ({name}, {stage}): {failure_reason(e)}")
        total = sa.result()
    except SecAggError as e:
        for c, reason in why.items():
            tally.failed.setdefault(c, reason)
        return None, [], f"secure aggregation ({name}) failed: {e}"
    summed = list(sa.summed)
    _record(tally, live, set(summed), why, sa, name)
    return unflatten(codec.decode(total), layout), summed, ""


def _record(tally: Tally, live: list[int], summed: set[int], why: dict[int, str], sa: SecAggServer, name: str) -> None:
    """Every live client not summed goes to ``failed`` with its first reason; a summed client whose
    unmask answer was refused goes to ``faults`` (one that merely dropped at the unmask stage is summed
    and not a failure)."""
    for c in live:
        if c in summed:
            if c in sa.faults:
                tally.faults.setdefault(c, f"secure aggregation ({name}): {sa.faults[c]}")
        elif c in why:
            tally.failed.setdefault(c, why[c])
        else:
            reason = sa.left_out.get(c, "its masked input could not be unmasked (the session failed)")
            tally.failed.setdefault(c, f"left out of secure aggregation ({name}): {reason}")


def flatten(tensors: dict[str, torch.Tensor], layout: dict[str, tuple[int, ...]]) -> torch.Tensor:
    """The tensors of ``layout`` (in its order) as one float64 vector."""
    parts = []
    for n, shape in layout.items():
        t = tensors[n]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"contribution {n!r} has shape {tuple(t.shape)}, the layout says {shape}")
        parts.append(t.reshape(-1).double())
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def unflatten(vector: torch.Tensor, layout: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`flatten`."""
    out, at = {}, 0
    for n, shape in layout.items():
        size = math.prod(shape)
        out[n] = vector[at : at + size].reshape(shape)
        at += size
    if at != vector.numel():
        raise ValueError(f"vector has {vector.numel()} values, the layout {at}")
    return out
