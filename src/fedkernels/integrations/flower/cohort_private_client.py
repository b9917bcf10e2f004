"""The node side of private rounds with cohort nodes: one message per node and stage carries the
stage's message of each of the node's sampled clients, and each client answers it as its own
:class:`fedkernels.fl.privacy.client.PrivateClient`, exactly as a one-client node's client does
(:mod:`.private_client`): its own SecAgg+ keys, mask seeds and shares, its own weight, clip and noise
stream. Only local training of a ``train`` message may run in one batched pass
(:func:`fedkernels.fl.privacy.client.train_together`, as the in-process ``PrivateServer`` runs it);
each client's contribution, clipping and noise share stay its own.

Each client's round secrets live in the node's ``context.state`` under its own key (:func:`state_key`),
restored before and saved after each of its messages, so a fresh ClientApp process per message works
as for one-client nodes. The node holds them all: it is trusted with its clients' secrets as it is
with their data (docs/api/flower.md, "Private rounds with cohort nodes").

A client's state matters only in its own round (the next round forgets it) and for its round number,
which refuses a message of an older round. So the node keeps one round floor (the newest round it was
sent, :data:`FLOOR`) and drops every client's state of an older round: what it holds is bounded by a
round's cohort, not by the clients of its shard ever sampled. A client with no state starts at the
floor, so a message of an older round is refused for every client of the node, as it was for a
client whose own state had moved on.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message

from ...fl import payload as pl
from ...fl.privacy.client import TRAIN, PrivateClient, train_together
from ...fl.privacy.forms import form_of
from ...fl.strategy import Strategy
from ...fl.types import ClientData, TrainConfig
from . import protocol as pr
from .private_client import STATE
from .records import record_to_bytes

FLOOR = f"{STATE}.floor"  # the context.state ConfigRecord holding the newest round the node was sent
_PREFIX = f"{STATE}."


def state_key(client: int) -> str:
    """The ``context.state`` ConfigRecord key of one client's private-round state on a cohort node."""
    return f"{_PREFIX}{client}"


def _floor(context: Context, round: int) -> int:
    """The node's round floor after a message of ``round``: the newest round it has been sent."""
    saved = context.state.config_records.get(FLOOR)
    old = saved.get("round") if saved is not None else None
    return max(round, old) if isinstance(old, int) else round


def _keep_round(context: Context, floor: int) -> None:
    """Record ``floor`` and drop every client's state of an older round (never read again)."""
    records = context.state.config_records
    records[FLOOR] = ConfigRecord({"round": floor})
    stale = [k for k, rec in records.items() if k.startswith(_PREFIX) and k != FLOOR and rec.get("round") != floor]
    for k in stale:
        del records[k]


def answer_cohort_private(
    header: ConfigRecord,
    message: Message,
    context: Context,
    strategy: Strategy,
    data: Mapping[int, ClientData],
    seeds: Mapping[int, int],
    train: TrainConfig,
    device: torch.device,
    noise_seed: int | None,
) -> dict[int, bytes | BaseException]:
    """Each named client's reply to its message of the stage (or its own failure).

    Args:
        header: the message's fedkernels header (``kind``, ``round``, ``clients``, ``download-of``,
            ``batch-clients``).
        message: the node's message: distinct client messages as ``COHORT_DOWNLOAD + i`` records.
        context: the node's Flower context; ``state`` keeps each client's round secrets.
        strategy: the node's strategy (initialised as the server's).
        data, seeds: client -> its local data and its round seed, for the clients the header names.
        train, device: the local-training settings and where the clients train.
        noise_seed: None (each client's noise share from OS randomness) or a seed (experiments).

    Raises:
        PayloadError: a header field missing or mistyped, a named message missing.
    """
    kind, rnd = pr.str_field(header, "kind"), pr.int_field(header, "round")
    which = pr.int_list_field(header, "download-of")
    if len(which) != len(seeds):
        raise pl.PayloadError("message field 'download-of' must name one message per client")
    raws: dict[int, bytes] = {}
    for i in sorted(set(which)):
        record = message.content.array_records.get(f"{pr.COHORT_DOWNLOAD}{i}")
        if not isinstance(record, ArrayRecord):
            raise pl.PayloadError(f"message carries no client message {i}")
        raws[i] = record_to_bytes(record)
    msgs = {c: raws[i] for c, i in zip(seeds, which, strict=True)}
    form = form_of(strategy)
    floor = _floor(context, rnd)
    at_floor = pl.encode({"round": torch.tensor([floor], dtype=torch.int64)})  # a client with no state
    clients: dict[int, PrivateClient] = {}
    for c in seeds:
        client = PrivateClient(c, strategy, form, data[c], train, noise_seed, device=device)
        saved = context.state.config_records.get(state_key(c))
        if saved is not None and isinstance(saved.get("state"), bytes) and saved.get("round") == floor:
            client.restore(saved["state"])  # type: ignore[arg-type]
        else:  # no state of the node's newest round: the client starts there
            client.restore(at_floor)
        clients[c] = client
    out: dict[int, bytes | BaseException] = {}
    batched = None
    # the in-process PrivateServer's choice: batch unless off, < 2 clients, or DP-SGD on the host
    host_dp_sgd = train.dp_sample_clip is not None and device.type == "cpu"
    if kind == TRAIN and pr.int_field(header, "batch-clients") and len(clients) >= 2 and not host_dp_sgd:
        batched = train_together(list(clients.values()), rnd, dict(seeds), msgs)
    if batched is not None:
        out.update(batched)
    else:
        for c, client in clients.items():
            try:
                out[c] = client.handle(kind, rnd, seeds[c], msgs[c])
            except Exception as e:  # this client's failure only (reported by id in the reply)
                out[c] = e
    for c, client in clients.items():
        context.state.config_records[state_key(c)] = ConfigRecord({"state": client.export(), "round": client.round})
    _keep_round(context, floor)
    return out
