"""One SecAgg+ session between real SecAggClient objects and a SecAggServer, through real
serialisation, with hooks for dropouts and for a client (or a server) that breaks the protocol."""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedkernels.fl import payload as pl
from fedkernels.fl.privacy.secagg import SecAggClient, SecAggParams, SecAggServer

# (stage, client, its reply) -> the reply that is sent instead (a malicious client)
Mutate = Callable[[str, int, dict], dict]


def run_session(
    params: SecAggParams,
    xs: dict[int, torch.Tensor],
    drop_at: dict[int, str] | None = None,
    mutate: Mutate | None = None,
    clients: dict[int, SecAggClient] | None = None,
) -> tuple[SecAggServer, dict[int, tuple[str, str]]]:
    """Every stage of one session; ``drop_at``: {client: the stage it never answers}; ``mutate``: a
    hook on every reply before it is sent. Returns the server (call ``.result()``) and, per client,
    the first (stage, reason) its reply was refused or its own refusal."""
    drop_at = drop_at or {}
    clients = clients if clients is not None else {c: SecAggClient(c, params) for c in params.participants}
    srv = SecAggServer(params)
    refused: dict[int, tuple[str, str]] = {}

    def stage(name: str, messages: dict, answer: Callable[[int, dict], dict], take: Callable) -> None:
        for c, m in messages.items():
            if drop_at.get(c) == name:
                continue
            try:
                reply = answer(c, pl.decode(pl.encode(m)))
            except ValueError as e:  # the client refuses the server's message
                refused.setdefault(c, (name, str(e)))
                continue
            if mutate is not None:
                reply = mutate(name, c, reply)
            try:
                take(c, pl.decode(pl.encode(reply), srv.spec(name, c)))
            except ValueError as e:
                refused.setdefault(c, (name, str(e)))

    stage("advertise", {c: {} for c in params.participants}, lambda c, m: clients[c].advertise(), srv.take_advertise)
    stage("share", srv.share_messages(), lambda c, m: clients[c].share_keys(m), srv.take_shares)
    stage("masked", srv.masked_messages(), lambda c, m: clients[c].masked_input(m, xs[c]), srv.take_masked)
    stage("seeds", srv.seeds_messages(), lambda c, m: clients[c].seeds(m), srv.take_seeds)
    stage("unmask", srv.unmask_messages(), lambda c, m: clients[c].unmask(m), srv.take_unmask)
    stage("repair", srv.repair_messages(), lambda c, m: clients[c].seeds(m), srv.take_seeds)
    return srv, refused


def ring_sum(xs: dict[int, torch.Tensor], ids: list[int], bits: int) -> torch.Tensor:
    """The reference: the plain modular sum of the vectors of ``ids``."""
    total = torch.zeros_like(next(iter(xs.values())))
    for c in ids:
        total = (total + xs[c]) % (1 << bits)
    return total
