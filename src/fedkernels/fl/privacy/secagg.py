"""SecAgg+ (Bell et al., CCS 2020): the server learns the sum of the clients' ring vectors and nothing
else about any one of them, and recovers the sum when up to ``max_dropouts`` clients drop out.

One session sums one ring vector per client in four exchanges, each a message from the server to
every live client and a reply (payload dicts of tensors, serialised like every other payload):

1. **advertise**: each client makes two X25519 key pairs (``c`` to encrypt shares, ``s`` for masks, the
   latter derived from a 16-byte seed ``s_seed``) and a 16-byte self-mask seed ``b``; it sends both
   public keys and SHA-256(b).
2. **share keys**: the server sends each client its neighbours' public keys. The neighbour graph is a
   Harary graph of degree ``k`` over a permutation of the participants seeded by a public seed, so every
   client checks the server's list. The client Shamir-shares ``b`` and ``s_seed``,
   ``threshold``-of-``k``, and sends share ``j`` to neighbour ``j`` encrypted with ChaCha20-Poly1305 under
   HKDF(X25519(c_u, c_v)).
3. **masked input**: the server routes the ciphertexts. Client u sends
   ``y_u = x_u + PRG(HKDF(b_u)) + sum_v ±PRG(HKDF(X25519(s_u, s_v)))`` over its neighbours v that shared keys
   (+ when u < v, - otherwise), all mod ``2^bits``. One ``y_u`` alone is uniform in the ring.
4. **unmask**: the server names, to each surviving client, which of the neighbours whose shares it
   holds sent ``y`` (survivors) and which did not (dropped): a message of O(k). Each surviving
   client returns, for each neighbour, the share of ``b`` (survivor) or of ``s_seed`` (dropped), never
   both. The server rebuilds each survivor's ``b`` (checked against its SHA-256) and each dropped
   client's ``s_seed`` (its key checked against its public key), removes those masks and is left
   with ``sum_{survivors} x_u``.

Guarantees (honest-but-curious server): a client's ``y`` reveals nothing; with ``threshold > k / 2`` the
server cannot obtain both secrets of any client from honest clients' answers, and up to
``threshold - 1`` colluding clients in a neighbourhood learn nothing either. Every neighbourhood keeps
``threshold`` holders whenever at most ``max_dropouts = k - threshold`` clients drop in the whole
session, so the sum is always recovered then; with more it may be (dropouts spread across
neighbourhoods) or :class:`SecAggError` says which client cannot be unmasked. The server learns the
set of survivors (as it always does). Malicious servers (inconsistent survivor lists, forged keys) are
out of scope: that needs the signature and consistency rounds of the full protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ..payload import Payload, PayloadSpec, TensorSpec
from . import crypto
from .ring import from_wire, to_wire, wire_dtype

PLAIN_BYTES = 16 + 2 * crypto.SHARE_BYTES  # src id, dst id, share of b, share of s
CT_BYTES = crypto.NONCE_BYTES + PLAIN_BYTES + crypto.TAG_BYTES


class SecAggError(ValueError):
    """A secure-aggregation session cannot go on (too many dropouts, a bad message); says why."""


def default_degree(n: int) -> int:
    """SecAgg+'s neighbours per client: every other client up to 16 participants, else an even
    ``2 ceil(1.5 log2 n)`` (20 at n = 100, 30 at n = 1000), so masking grows as n log n, not n^2."""
    if n - 1 <= 16:
        return max(n - 1, 0)
    return min(n - 1, 2 * math.ceil(1.5 * math.log2(n)))


@dataclass(frozen=True)
class SecAggParams:
    """The public parameters of one session (the same on the server and every client).

    Args:
        participants: sorted client ids taking part.
        length: ring elements per client vector.
        bits: the ring is Z_{2^bits}.
        max_dropouts: t, the dropouts always tolerated; ``threshold = degree - t`` shares rebuild a secret.
        graph_seed: seeds the neighbour graph (public).
        session: bytes naming the session (run, round, stage): binds keys, masks and ciphertexts to it.
        degree: neighbours per client (default :func:`default_degree`); even, or ``n - 1`` (everyone).
    """

    participants: tuple[int, ...]
    length: int
    bits: int
    max_dropouts: int
    graph_seed: int
    session: bytes
    degree: int | None = None

    def __post_init__(self) -> None:
        n = len(self.participants)
        if n < 2 or list(self.participants) != sorted(set(self.participants)):
            raise ValueError(f"participants must be >= 2 distinct sorted ids, got {self.participants[:8]}...")
        if self.length < 0:
            raise ValueError(f"length must be >= 0, got {self.length}")
        k = self.k
        if not 1 <= k <= n - 1 or (k != n - 1 and k % 2):
            raise ValueError(f"degree must be even and in [2, {n - 1}], or {n - 1} (every other client); got {k}")
        if self.max_dropouts < 0 or self.threshold <= k // 2:
            raise ValueError(
                f"max_dropouts must lie in [0, {k - k // 2 - 1}] for {k} neighbours (threshold = degree - "
                f"max_dropouts must exceed half the neighbours), got {self.max_dropouts}"
            )

    @property
    def k(self) -> int:
        n = len(self.participants)
        return default_degree(n) if self.degree is None else min(int(self.degree), n - 1)

    @property
    def threshold(self) -> int:
        return self.k - self.max_dropouts

    def info(self, what: bytes) -> bytes:
        return b"fedkernels-secagg-v1|" + self.session + b"|" + what


def _ring(params: SecAggParams) -> list[int]:
    """The participants in the graph's seeded ring order (public: every party computes the same)."""
    ids = list(params.participants)
    return [ids[i] for i in np.random.default_rng(params.graph_seed).permutation(len(ids))]


def _around(ring: list[int], pos: int, k: int) -> list[int]:
    """The Harary neighbours of ``ring[pos]``: the ``k // 2`` participants on each side, sorted."""
    n, half = len(ring), k // 2
    return sorted({ring[(pos + off) % n] for off in range(-half, half + 1) if off})


def neighbour_graph(params: SecAggParams) -> dict[int, list[int]]:
    """Each participant's neighbours, sorted: a Harary graph of degree k (offsets ±1..±k/2 on a ring)
    over a seeded permutation of the participants, or everyone when k = n - 1. O(n k): the server's
    view; a client needs only :func:`neighbours_of`."""
    ids = list(params.participants)
    if params.k == len(ids) - 1:
        return {c: [d for d in ids if d != c] for c in ids}
    ring = _ring(params)
    return {c: _around(ring, pos, params.k) for pos, c in enumerate(ring)}


def neighbours_of(params: SecAggParams, client: int) -> list[int]:
    """``neighbour_graph(params)[client]`` without building the whole graph: O(n) for the permutation
    plus O(k), so that each of n clients does not pay the server's O(n k) (n^2 k over a session)."""
    ids = list(params.participants)
    if params.k == len(ids) - 1:
        return [d for d in ids if d != client]
    ring = _ring(params)
    return _around(ring, ring.index(client), params.k)


def _u8(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)


def _rows(t: torch.Tensor) -> list[bytes]:
    return [bytes(r.contiguous().numpy().tobytes()) for r in t]


def _aad(params: SecAggParams, src: int, dst: int) -> bytes:
    return params.info(b"share") + src.to_bytes(8, "little") + dst.to_bytes(8, "little")


def _sign(u: int, v: int) -> int:
    return 1 if u < v else -1


def _self_mask(params: SecAggParams, b: bytes) -> torch.Tensor:
    return crypto.mask_stream(crypto.expand(b, params.info(b"self-mask")), params.length, params.bits, b"self")


# ---- client side -----------------------------------------------------------------------------------


class SecAggClient:
    """One client's side of one session. Holds its secrets; every method answers one server message.

    Args:
        client_id: this client.
        params: the session's public parameters (the client recomputes its neighbours from them).
    """

    def __init__(self, client_id: int, params: SecAggParams) -> None:
        if client_id not in params.participants:
            raise SecAggError(f"client {client_id} is not a participant of this session")
        self.id, self.params = client_id, params
        self.neighbours = neighbours_of(params, client_id)
        self.c_sk = crypto.new_private_key()
        self.s_seed = crypto.random_bytes(crypto.SEED_BYTES)
        self.s_sk = crypto.private_key_from_seed(self.s_seed, params.info(b"mask-key"))
        self.b = crypto.random_bytes(crypto.SEED_BYTES)
        self.peer_s_pk: dict[int, bytes] = {}
        self.peer_c_pk: dict[int, bytes] = {}
        self.held: dict[int, tuple[bytes, bytes]] = {}  # neighbour -> (its b share, its s share) for me
        self.stage = 0

    def export(self) -> Payload:
        """This client's session secrets and progress as tensors, for a transport that runs each
        message in a fresh process (Flower's deployment engine): they stay on the client's device
        (e.g. its Flower ``context.state``) and :meth:`restore` takes them back."""
        peers = sorted(self.peer_s_pk)
        held = sorted(self.held)
        return {
            "c_sk": _u8(self.c_sk),
            "s_seed": _u8(self.s_seed),
            "b": _u8(self.b),
            "stage": torch.tensor([self.stage], dtype=torch.int64),
            "peers": torch.tensor(peers, dtype=torch.int64),
            "peer_c_pk": _u8(b"".join(self.peer_c_pk[v] for v in peers)).reshape(len(peers), crypto.KEY_BYTES),
            "peer_s_pk": _u8(b"".join(self.peer_s_pk[v] for v in peers)).reshape(len(peers), crypto.KEY_BYTES),
            "held": torch.tensor(held, dtype=torch.int64),
            "held_shares": _u8(b"".join(self.held[u][0] + self.held[u][1] for u in held)).reshape(
                len(held), 2 * crypto.SHARE_BYTES
            ),
        }

    @classmethod
    def restore(cls, client_id: int, params: SecAggParams, saved: Payload) -> SecAggClient:
        """The client :meth:`export` saved, for the same session ``params``."""
        self = cls.__new__(cls)
        if client_id not in params.participants:
            raise SecAggError(f"client {client_id} is not a participant of this session")
        self.id, self.params = client_id, params
        self.neighbours = neighbours_of(params, client_id)
        self.c_sk = bytes(saved["c_sk"].numpy().tobytes())
        self.s_seed = bytes(saved["s_seed"].numpy().tobytes())
        self.s_sk = crypto.private_key_from_seed(self.s_seed, params.info(b"mask-key"))
        self.b = bytes(saved["b"].numpy().tobytes())
        self.stage = int(saved["stage"][0])
        peers = [int(v) for v in saved["peers"].tolist()]
        self.peer_c_pk = dict(zip(peers, _rows(saved["peer_c_pk"]), strict=True))
        self.peer_s_pk = dict(zip(peers, _rows(saved["peer_s_pk"]), strict=True))
        rows = _rows(saved["held_shares"])
        n = crypto.SHARE_BYTES
        self.held = {int(u): (r[:n], r[n:]) for u, r in zip(saved["held"].tolist(), rows, strict=True)}
        return self

    def _step(self, want: int) -> None:
        if self.stage != want:
            raise SecAggError(f"client {self.id}: message for stage {want + 1} arrived at stage {self.stage + 1}")
        self.stage += 1

    def advertise(self) -> Payload:
        """Stage 1: public keys and the self-mask commitment."""
        self._step(0)
        return {
            "c_pk": _u8(crypto.public_key(self.c_sk)),
            "s_pk": _u8(crypto.public_key(self.s_sk)),
            "b_commit": _u8(crypto.sha256(self.b)),
        }

    def share_keys(self, msg: Payload) -> Payload:
        """Stage 2: encrypted Shamir shares of ``b`` and ``s`` for each live neighbour the server lists."""
        self._step(1)
        ids = [int(i) for i in msg["ids"].tolist()]
        if not set(ids) <= set(self.neighbours) or len(set(ids)) != len(ids):
            raise SecAggError(f"client {self.id}: the server's neighbour list is not a subset of the public graph's")
        if len(ids) < self.params.threshold:
            raise SecAggError(
                f"client {self.id}: only {len(ids)} live neighbours, fewer than the {self.params.threshold} "
                "needed to rebuild its secrets"
            )
        c_pk, s_pk = _rows(msg["c_pk"]), _rows(msg["s_pk"])
        self.peer_s_pk = dict(zip(ids, s_pk, strict=True))
        self.peer_c_pk = dict(zip(ids, c_pk, strict=True))
        k, r = len(self.neighbours), self.params.threshold
        b_shares = crypto.split_secret(self.b, r, k)
        s_shares = crypto.split_secret(self.s_seed, r, k)
        cts = []
        for v, pk in zip(ids, c_pk, strict=True):
            j = self.neighbours.index(v)  # holder index j + 1, fixed by the public graph
            key = crypto.agree(self.c_sk, pk, self.params.info(b"enc"))
            plain = self.id.to_bytes(8, "little") + v.to_bytes(8, "little") + b_shares[j] + s_shares[j]
            cts.append(crypto.encrypt(key, plain, _aad(self.params, self.id, v)))
        flat = b"".join(cts)
        return {"ids": torch.tensor(ids, dtype=torch.int64), "cts": _u8(flat).reshape(len(ids), CT_BYTES)}

    def masked_input(self, msg: Payload, x: torch.Tensor) -> Payload:
        """Stage 3: decrypt the shares routed to this client, then ``y = x + masks`` (ring int64 ``x [length]``).

        ``msg`` holds ``ids`` (the live neighbours whose shares arrive, in order) and their ``cts``."""
        self._step(2)
        p = self.params
        if x.shape != (p.length,) or x.dtype != torch.int64:
            raise ValueError(f"x must be int64 [{p.length}] ring elements, got {x.dtype} {tuple(x.shape)}")
        ids = [int(i) for i in msg["ids"].tolist()]
        if not set(ids) <= set(self.peer_s_pk) or len(set(ids)) != len(ids):
            raise SecAggError(f"client {self.id}: shares routed from clients that are not live neighbours")
        for u, ct in zip(ids, _rows(msg["cts"]), strict=True):
            key = crypto.agree(self.c_sk, self.peer_c_pk[u], p.info(b"enc"))
            plain = crypto.decrypt(key, ct, _aad(p, u, self.id))
            if int.from_bytes(plain[:8], "little") != u or int.from_bytes(plain[8:16], "little") != self.id:
                raise SecAggError(f"client {self.id}: a share's header does not name its sender and receiver")
            self.held[u] = (plain[16 : 16 + crypto.SHARE_BYTES], plain[16 + crypto.SHARE_BYTES :])
        mod = (1 << p.bits) - 1
        y = (x + _self_mask(p, self.b)) & mod
        for u in ids:  # pairwise masks with the neighbours that shared keys (they cancel between survivors)
            seed = crypto.agree(self.s_sk, self.peer_s_pk[u], p.info(b"mask"))
            m = crypto.mask_stream(seed, p.length, p.bits, b"pair")
            y = (y + m if _sign(self.id, u) > 0 else y - m) & mod
        return {"y": to_wire(y, p.bits)}

    def unmask(self, msg: Payload) -> Payload:
        """Stage 4: for each neighbour whose shares this client holds, the share of ``b`` if the server
        lists it as a survivor or of ``s`` if dropped; one kind per neighbour, once."""
        self._step(3)
        survivors = {int(i) for i in msg["survivors"].tolist()}
        dropped = {int(i) for i in msg["dropped"].tolist()}
        if survivors & dropped:
            raise SecAggError(f"client {self.id}: the server lists clients as both survivors and dropped")
        if len(survivors) + 1 < self.params.threshold:  # its own input must not be summed with too few others
            raise SecAggError(
                f"client {self.id}: {len(survivors)} surviving neighbours and itself, fewer than the threshold"
            )
        ids, kinds, shares = [], [], []
        for u, (b_share, s_share) in sorted(self.held.items()):
            if u in survivors or u in dropped:
                kind = 0 if u in survivors else 1
                ids.append(u)
                kinds.append(kind)
                shares.append(b_share if kind == 0 else s_share)
        return {
            "ids": torch.tensor(ids, dtype=torch.int64),
            "kind": torch.tensor(kinds, dtype=torch.uint8),
            "shares": _u8(b"".join(shares)).reshape(len(ids), crypto.SHARE_BYTES),
        }


# ---- server side -----------------------------------------------------------------------------------


def _key_spec() -> TensorSpec:
    return TensorSpec(torch.uint8, (crypto.KEY_BYTES,))


@dataclass
class SecAggServer:
    """The server's side of one session: builds each stage's messages from the previous replies and
    rebuilds the sum at the end. Replies are decoded payloads already checked against the stage's
    :meth:`spec` (what :meth:`fedkernels.fl.payload.decode` does with it); content checks happen here
    and raise :class:`SecAggError` (a ``ValueError``: the client is dropped from the session).
    """

    params: SecAggParams
    graph: dict[int, list[int]] = field(init=False)
    keys: dict[int, tuple[bytes, bytes, bytes]] = field(default_factory=dict)  # U1: c_pk, s_pk, b_commit
    cts: dict[int, dict[int, bytes]] = field(default_factory=dict)  # U2: sender -> {receiver: ct}
    ys: dict[int, torch.Tensor] = field(default_factory=dict)  # U3: masked inputs
    shares: dict[int, Payload] = field(default_factory=dict)  # U4: unmask answers
    routed: dict[int, list[int]] = field(default_factory=dict)  # receiver -> senders whose shares it got

    def __post_init__(self) -> None:
        self.graph = neighbour_graph(self.params)

    def spec(self, stage: str, client: int) -> PayloadSpec:
        """What a well-formed reply of ``client`` at ``stage`` looks like (sizes fixed by the session)."""
        k = self.params.k
        if stage == "advertise":
            return PayloadSpec({"c_pk": _key_spec(), "s_pk": _key_spec(), "b_commit": _key_spec()})
        if stage == "share":
            ids = TensorSpec(torch.int64, ("n",), max_numel=k, min_value=0, unique=True)
            return PayloadSpec({"ids": ids, "cts": TensorSpec(torch.uint8, ("n", CT_BYTES), max_numel=k * CT_BYTES)})
        if stage == "masked":
            return PayloadSpec({"y": TensorSpec(wire_dtype(self.params.bits), (self.params.length,))})
        if stage == "unmask":
            return PayloadSpec(
                {
                    "ids": TensorSpec(torch.int64, ("m",), max_numel=k, min_value=0, unique=True),
                    "kind": TensorSpec(torch.uint8, ("m",), max_numel=k, min_value=0, max_value=2),
                    "shares": TensorSpec(torch.uint8, ("m", crypto.SHARE_BYTES), max_numel=k * crypto.SHARE_BYTES),
                }
            )
        raise ValueError(f"unknown stage {stage!r}")

    # stage 1
    def take_advertise(self, client: int, reply: Payload) -> None:
        """A client's public keys (the client joins U1)."""
        self.keys[client] = (
            bytes(reply["c_pk"].numpy().tobytes()),
            bytes(reply["s_pk"].numpy().tobytes()),
            bytes(reply["b_commit"].numpy().tobytes()),
        )

    def share_messages(self) -> dict[int, Payload]:
        """Stage 2 messages: each U1 client's live neighbours and their public keys."""
        out = {}
        for c in sorted(self.keys):
            live = [v for v in self.graph[c] if v in self.keys]
            out[c] = {
                "ids": torch.tensor(live, dtype=torch.int64),
                "c_pk": _u8(b"".join(self.keys[v][0] for v in live)).reshape(len(live), crypto.KEY_BYTES),
                "s_pk": _u8(b"".join(self.keys[v][1] for v in live)).reshape(len(live), crypto.KEY_BYTES),
            }
        return out

    # stage 2
    def take_shares(self, client: int, reply: Payload) -> None:
        """A client's encrypted shares, one per live neighbour, in the order it was sent (joins U2)."""
        want = [v for v in self.graph[client] if v in self.keys]
        got = [int(i) for i in reply["ids"].tolist()]
        if got != want:
            raise SecAggError(f"client {client} sent shares for {got}, expected its live neighbours {want}")
        self.cts[client] = dict(zip(got, _rows(reply["cts"]), strict=True))

    def masked_messages(self) -> dict[int, Payload]:
        """Stage 3 messages: the shares addressed to each U2 client from U2 senders."""
        out = {}
        for v in sorted(self.cts):
            senders = [u for u in self.graph[v] if u in self.cts and v in self.cts[u]]
            self.routed[v] = senders
            out[v] = {
                "ids": torch.tensor(senders, dtype=torch.int64),
                "cts": _u8(b"".join(self.cts[u][v] for u in senders)).reshape(len(senders), CT_BYTES),
            }
        return out

    # stage 3
    def take_masked(self, client: int, reply: Payload) -> None:
        """A client's masked vector (joins U3). Raises SecAggError if it did not share keys."""
        if client not in self.cts:
            raise SecAggError(f"client {client} sent a masked input without having shared keys")
        self.ys[client] = from_wire(reply["y"], self.params.bits)

    def unmask_messages(self) -> dict[int, Payload]:
        """Stage 4 messages: to each survivor (U3), which of the neighbours whose shares it holds
        survived and which dropped (U2 minus U3): O(k) a client, not the whole survivor list."""
        out = {}
        for v in sorted(self.ys):
            held = self.routed.get(v, [])
            out[v] = {
                "survivors": torch.tensor([u for u in held if u in self.ys], dtype=torch.int64),
                "dropped": torch.tensor([u for u in held if u not in self.ys], dtype=torch.int64),
            }
        return out

    # stage 4
    def take_unmask(self, client: int, reply: Payload) -> None:
        """A survivor's shares (joins U4): only of neighbours it received shares from, of the right kind."""
        if client not in self.ys:
            raise SecAggError(f"client {client} sent shares without a masked input")
        ok = set(self.routed.get(client, []))
        for u, kind in zip(reply["ids"].tolist(), reply["kind"].tolist(), strict=True):
            if u not in ok or kind != (0 if u in self.ys else 1):
                raise SecAggError(f"client {client} sent a share it does not hold or of the wrong kind (client {u})")
        self.shares[client] = reply

    @property
    def survivors(self) -> list[int]:
        """U3: the clients whose vectors are in the sum."""
        return sorted(self.ys)

    def result(self) -> torch.Tensor:
        """The sum over survivors of their vectors, int64 ring elements ``[length]``.

        Raises:
            SecAggError: no survivor, or a secret without ``threshold`` shares (the message names the
                client and the counts), or shares that do not rebuild the committed secret.
        """
        p = self.params
        if not self.ys:
            raise SecAggError("no client sent a masked input")
        mod = (1 << p.bits) - 1
        b_sh: dict[int, dict[int, bytes]] = {}
        s_sh: dict[int, dict[int, bytes]] = {}
        for holder, rep in self.shares.items():
            rows = _rows(rep["shares"])
            for u, kind, sh in zip(rep["ids"].tolist(), rep["kind"].tolist(), rows, strict=True):
                index = self.graph[u].index(holder) + 1  # the holder index u gave this share
                (b_sh if kind == 0 else s_sh).setdefault(u, {})[index] = sh
        total = torch.zeros(p.length, dtype=torch.int64)
        for y in self.ys.values():
            total = (total + y) & mod
        for u in self.survivors:
            b = self._rebuild(u, b_sh.get(u, {}), "self-mask seed")
            if crypto.sha256(b) != self.keys[u][2]:
                raise SecAggError(f"the shares of client {u}'s self-mask seed do not match its commitment")
            total = (total - _self_mask(p, b)) & mod
        for u in sorted(set(self.cts) - set(self.ys)):
            s_sk = crypto.private_key_from_seed(self._rebuild(u, s_sh.get(u, {}), "mask key"), p.info(b"mask-key"))
            if crypto.public_key(s_sk) != self.keys[u][1]:
                raise SecAggError(f"the shares of dropped client {u}'s mask key do not match its public key")
            for v in self.graph[u]:
                if v in self.ys and u in self.routed.get(v, []):  # v masked with u: take v's term out
                    seed = crypto.agree(s_sk, self.keys[v][1], p.info(b"mask"))
                    m = crypto.mask_stream(seed, p.length, p.bits, b"pair")
                    total = (total - m if _sign(v, u) > 0 else total + m) & mod
        return total

    def _rebuild(self, u: int, shares: dict[int, bytes], what: str) -> bytes:
        r = self.params.threshold
        if len(shares) < r:
            raise SecAggError(
                f"cannot unmask: client {u}'s {what} has {len(shares)} of the {r} shares needed (too many "
                f"dropouts: at most {self.params.max_dropouts} are always tolerated)"
            )
        return crypto.combine_shares(shares, r)
