"""The client side of private rounds over Flower: a :data:`~.protocol.PRIVATE` message is answered by
:class:`fedkernels.fl.privacy.client.PrivateClient`, exactly as in-process.

Flower's deployment engine runs each message in a fresh ClientApp process, and its simulation engine
may serve a node's messages from different workers, so nothing a client holds between the messages of
a round (its SecAgg+ secret keys, mask seeds and the shares it holds for its neighbours, its
contribution in the clear) can live in the process. It lives in the node's ``context.state``, which
Flower keeps on the SuperNode (or, simulated, in the engine) and never sends to the SuperLink, as
Flower's own SecAgg+ mod keeps its secrets. Each message restores it, answers, and saves it back.

Requires the extra ``fedkernels[privacy]`` on the node (imported only when a private message comes).
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import ConfigRecord, Context

from ...fl.privacy.client import PrivateClient
from ...fl.privacy.forms import form_of
from ...fl.strategy import Strategy
from ...fl.types import ClientData, TrainConfig
from . import protocol as pr

STATE = "fedkernels.private"  # the context.state ConfigRecord holding a node's private-round state


def answer_private(
    header: ConfigRecord,
    message: bytes,
    context: Context,
    client_id: int,
    strategy: Strategy,
    data: ClientData,
    train: TrainConfig,
    noise_seed: int | None,
    held_out: Callable[[], ClientData] | None = None,
) -> bytes:
    """This node's reply to one private message (bytes of the payload in, bytes out).

    Args:
        header: the message's fedkernels header (``kind``, ``round``, ``seed`` and the run fields).
        message: the message's payload bytes (already bounded by :mod:`.records`).
        context: the node's Flower context; its ``state`` keeps the round's secrets between messages.
        client_id, strategy, data, train: this node's client, its strategy (initialised as the
            server's), its data and the local-training settings of the header.
        noise_seed: None (distributed DP noise from OS randomness) or a seed (reproducible experiments).
        held_out: this node's held-out data for a federated evaluation under secure aggregation
            (read only when an ``eval`` message comes), or None.

    Raises:
        PayloadError: a header field is missing or mistyped. ValueError (from PrivateClient): an
            unknown kind or a message that does not fit the round's state.
    """
    kind = pr.str_field(header, "kind")
    client = PrivateClient(client_id, strategy, form_of(strategy), data, train, noise_seed, held_out)
    saved = context.state.config_records.get(STATE)
    if saved is not None and isinstance(saved.get("state"), bytes):
        client.restore(saved["state"])  # type: ignore[arg-type]
    out = client.handle(kind, pr.int_field(header, "round"), pr.int_field(header, "seed"), message)
    context.state.config_records[STATE] = ConfigRecord({"state": client.export()})
    return out
