"""A cohort node's reply, checked before any upload in it is read, split into its clients' answers.

The reply as a whole must name only clients sent to that node, each once, carry no more uploads than
it was sent clients, and no record that names no answering client; a malformed reply fails every
client of its node. Each upload is then bounded by its own client's byte limit before a tensor is
built (:func:`~.records.record_to_bytes`); its round tag travels beside it for the round protocol's
replay check, as from a one-client node. Uploads (``carried``) are handed to the round protocol as
tensors (:func:`~.records.record_to_carried`: the same bounds first, counted at their safetensors
length, the same checks after), not re-serialised to bytes only to be decoded again.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Message

from ...fl import evaluation as ev
from ...fl import payload as pl
from ...fl.client import ROUND_TAG
from ...fl.round import Answer, Carried, ClientFailed, ClientSentNothing
from . import protocol as pr
from .records import record_to_bytes, record_to_carried

MISSING = "sent no upload: missing from its node's reply"


def split_reply(
    reply: Message, clients: list[int], limit: Callable[[int], int], weighted: bool, carried: bool = False
) -> tuple[dict[int, Answer | Carried], dict[int, int]]:
    """A well-formed reply's per-client answers and example counts (``carried``: each record as a
    :class:`~fedkernels.fl.round.Carried` payload, else as safetensors bytes).

    Raises:
        PayloadError: the reply as a whole is malformed: no header, a client named that was not sent
            to the node or named twice, more uploads than clients sent, fields of unequal length.
    """
    head = reply.content.config_records.get(pr.KEY)
    if head is None:
        raise pl.PayloadError(f"reply carries no {pr.KEY!r} record")
    arrays = reply.content.array_records
    if len(arrays) > len(clients):  # before any of them is read
        raise pl.PayloadError(f"reply carries {len(arrays)} uploads, its node was sent {len(clients)} clients")
    named, failed = pr.int_list_field(head, "clients"), pr.int_list_field(head, "failed")
    tags, reasons = head.get("round-tags"), head.get("failed-reasons")
    if not (isinstance(tags, list) and all(isinstance(t, str) and len(t) <= pr.MAX_ROUND_TAG for t in tags)):
        raise pl.PayloadError("message field 'round-tags' must be a list of short strings")
    if not (isinstance(reasons, list) and all(isinstance(t, str) for t in reasons)):
        raise pl.PayloadError("message field 'failed-reasons' must be a list of strings")
    examples = pr.int_list_field(head, "num-examples") if weighted else [0] * len(named)
    if not len(named) == len(tags) == len(examples) or len(failed) != len(reasons):
        raise pl.PayloadError(
            "reply fields 'clients', 'round-tags', 'num-examples' (and 'failed', 'failed-reasons') differ in length"
        )
    sent = set(clients)
    everyone = named + failed
    strangers = sorted(set(everyone) - sent)
    if strangers:
        raise pl.PayloadError(f"reply names client(s) {strangers[:8]} not sent to its node")
    if len(set(everyone)) != len(everyone):
        raise pl.PayloadError("reply names a client more than once")
    extra = sorted(set(arrays) - {pr.cohort_key(c) for c in named})
    if extra:
        raise pl.PayloadError(f"reply carries record(s) {extra[:4]!r:.120} that name no answering client")
    out: dict[int, Answer | Carried] = {}
    convert = record_to_carried if carried else record_to_bytes
    counts: dict[int, int] = {}
    for c, why in zip(failed, reasons, strict=True):
        out[c] = ClientFailed(f"crashed: {why}"[: pr.MAX_REASON_CHARS])
    for c, tag, n in zip(named, [str(t) for t in tags], examples, strict=True):
        if weighted and not 0 <= n <= ev.MAX_EXAMPLES:
            out[c] = pl.PayloadError(f"message field 'num-examples' must be in [0, {ev.MAX_EXAMPLES}], got {n}")
            continue
        key = pr.cohort_key(c)
        if key not in arrays:
            out[c] = None  # the client sent nothing
        else:
            try:
                out[c] = convert(arrays[key], limit(c), {ROUND_TAG: tag} if tag else None)
            except pl.PayloadError as e:
                out[c] = e
                continue
        if weighted:
            counts[c] = n
    for c in clients:
        if c not in out:
            out[c] = ClientSentNothing(MISSING)
    return out, counts
