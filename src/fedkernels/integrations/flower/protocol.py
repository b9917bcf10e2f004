"""The fedkernels message protocol over Flower: message types, record keys, header fields, and the
version and run-identity handshake shared by the server and the client sides.

Every fedkernels message carries a ``ConfigRecord`` under :data:`KEY` (the header: round, client,
seeds, local training settings and the server's run identity); payloads travel as ``ArrayRecord``
objects under :data:`PAYLOAD` (:mod:`.records`). Message types (``server_round`` = fedkernels
round + 1 in ``group_id``):

- :data:`IDENTIFY` (query): to each node not yet known. The node answers which client it is
  (``node_config["partition-id"]``), its fedkernels version and its run identity, without loading
  any data. A node whose version or strategy options differ from the server's is refused.
- :data:`SETUP` (query): the setup exchange of strategies that have one (FedALC's label sets).
- :data:`REQUEST` (query): the chosen clients' ``client_request`` (FedSS's class ids).
- ``train``: the download; the reply is the upload plus the client's example count.
- :data:`PRIVATE` (query): one message of a private round (secure aggregation, DP), header field
  ``kind`` (``count``, ``train``, ``<session>/<stage>``) and the message bytes as the payload; the
  reply is :meth:`fedkernels.fl.privacy.client.PrivateClient.handle`'s (:mod:`.private_client`).
- ``evaluate``: the global state for federated evaluation; the reply is the client's report.
- Cohort nodes (:mod:`.cohort_server`): :data:`COHORT_REQUEST` and ``train`` name a node's sampled
  clients; :data:`COHORT_PRIVATE` (query) carries one private-round message of ``kind`` for each of
  them (``COHORT_DOWNLOAD + i`` records, ``download-of``), answered per client
  (:mod:`.cohort_private_client`).

Every reply names the client (``client-id``) and, for train and evaluation, its example count:
the server learns a client's weight from its replies, never from a separate hello.
"""

from __future__ import annotations

import hashlib
import json

from flwr.app import ConfigRecord, MessageType

from ... import _C
from ...fl import payload as pl
from ...fl.strategy import Strategy

KEY = "fedkernels"  # the ConfigRecord every fedkernels message and reply carries
PAYLOAD = "fedkernels.payload"  # the ArrayRecord of a message's payload (download, upload, report)
# the upload's round tag (fedkernels.fl.client.ROUND_TAG), in the reply's header: arrays carry no metadata
ROUND_TAG_FIELD = "round-tag"
MAX_ROUND_TAG = 24  # characters: a round number; longer is refused before it is used
IDENTIFY = f"{MessageType.QUERY}.fedkernels_identify"
SETUP = f"{MessageType.QUERY}.fedkernels_setup"
REQUEST = f"{MessageType.QUERY}.fedkernels_request"
PRIVATE = f"{MessageType.QUERY}.fedkernels_private"
# cohort nodes (.cohort_server): a round's requests of a node's sampled clients in one query
COHORT_REQUEST = f"{MessageType.QUERY}.fedkernels_cohort_request"
# cohort nodes' private rounds (.cohort_private_server): one stage's messages of a node's clients
COHORT_PRIVATE = f"{MessageType.QUERY}.fedkernels_cohort_private"
COHORT = "cohort"  # the identify reply's "mode" of a cohort node
COHORT_DOWNLOAD = PAYLOAD + ".down."  # + index: one distinct download of a cohort train message
MAX_REASON_CHARS = 300  # a cohort reply's failure reason of one client, at most
MAX_IDENTITY_CHARS = 1 << 16  # a longer identity in a reply is refused unread


def cohort_key(client: int) -> str:
    """The record key of client ``client``'s payload (upload or request) in a cohort node's reply."""
    return f"{PAYLOAD}.{client}"


def fedkernels_version() -> str:
    """The version of the fedkernels build in this process."""
    return str(_C.build_info()["version"])


def run_identity(strategy: Strategy) -> str:
    """What a client and the server must agree on, as canonical JSON: the fedkernels version, the
    strategy's name and its options (``Strategy.options()``)."""
    ident = {"fedkernels": fedkernels_version(), "strategy": strategy.name, "options": strategy.options()}
    return json.dumps(ident, sort_keys=True, default=str)


def identity_digest(identity: str) -> str:
    """A short, stable name of a run identity (SHA-256 hex of its JSON) for message headers."""
    return hashlib.sha256(identity.encode()).hexdigest()


def identity_mismatch(server: str, node: object) -> str | None:
    """Why a node's run identity (what it replied) differs from the server's, or ``None`` if equal.
    Names the first differing field: ``fedkernels``, ``strategy`` or ``options.<key>``."""
    if not isinstance(node, str) or len(node) > MAX_IDENTITY_CHARS:
        return "sent no valid run identity"
    try:
        mine, theirs = json.loads(server), json.loads(node)
    except ValueError:
        return "sent no valid run identity"
    if not isinstance(theirs, dict):
        return "sent no valid run identity"
    for key in ("fedkernels", "strategy"):
        if theirs.get(key) != mine[key]:
            return f"{key} {theirs.get(key)!r} on the node, {mine[key]!r} on the server"
    want, have = mine["options"], theirs.get("options")
    if not isinstance(have, dict):
        return "sent no strategy options"
    for k in sorted(set(want) | set(have)):
        if have.get(k) != want.get(k):
            return f"strategy option {k}={have.get(k)!r} on the node, {want.get(k)!r} on the server"
    return None


def int_field(rec: ConfigRecord, key: str) -> int:
    """``rec[key]`` as an int (PayloadError naming the field if it is missing or not an int)."""
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise pl.PayloadError(f"message field {key!r} must be an int, got {type(v).__name__}")
    return v


def float_field(rec: ConfigRecord, key: str) -> float:
    """``rec[key]`` as a float (an int is accepted)."""
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise pl.PayloadError(f"message field {key!r} must be a float, got {type(v).__name__}")
    return float(v)


def str_field(rec: ConfigRecord, key: str) -> str:
    """``rec[key]`` as a str."""
    v = rec.get(key)
    if not isinstance(v, str):
        raise pl.PayloadError(f"message field {key!r} must be a str, got {type(v).__name__}")
    return v


def int_list_field(rec: ConfigRecord, key: str) -> list[int]:
    """``rec[key]`` as a list of ints."""
    v = rec.get(key)
    if not isinstance(v, list) or not all(type(k) is int for k in v):
        raise pl.PayloadError(f"message field {key!r} must be a list of ints")
    return [int(k) for k in v]
