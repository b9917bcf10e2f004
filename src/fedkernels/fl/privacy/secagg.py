"""SecAgg+ (Bell et al., CCS 2020): the server learns the sum of the summed clients' ring vectors and
nothing else about any one of them; clients that drop out, or that send malformed messages, are left
out and the sum of the others is still recovered.

One session sums one ring vector per client in four exchanges, each a message from the server to
every live client and a reply (payload dicts of tensors, serialised like every other payload), plus
a ``seeds`` exchange before the unmask stage and a ``repair`` exchange after it, each only when a
client broke the protocol:

1. **advertise**: each client makes two X25519 key pairs (``c`` to encrypt shares; ``s`` for masks,
   derived from a 16-byte seed ``s_seed``) and a 16-byte self-mask seed ``b``; it sends both public
   keys and SHA-256(b). The server refuses a key that is not a usable X25519 point (an all-zero or
   other low-order key would make every neighbour's key agreement fail) or that a participant
   already advertised (a copied key): that client is left out, no one else.
2. **share keys**: the server sends each client its neighbours' public keys. The neighbour graph is a
   Harary graph of degree ``k`` over a permutation seeded by a seed the server draws from OS
   randomness for this session; each client recomputes its own neighbours and refuses a list that
   is not a subset of them or that holds a key twice. The client Shamir-shares ``b`` and ``s_seed``
   (``threshold``-of-``k``, pycryptodome's GF(2^128) Shamir) and sends each neighbour its two shares,
   each with a fresh 16-byte nonce, encrypted with ChaCha20-Poly1305 under HKDF-SHA256 of the X25519
   agreement bound to the session and to (sender, receiver); beside each ciphertext, in the clear, a
   SHA-256 commitment to each share and its nonce.
3. **masked input**: the server routes the ciphertexts and commitments. A client decrypts each and
   checks both shares against their commitments; one that fails is *rejected* (named in the reply;
   nobody is blamed yet, the share counts as missing). It sends
   ``y_u = x_u + PRG(HKDF(b_u)) + sum_v ±PRG(s_uv)`` over the neighbours v whose shares were routed to
   it, where the pairwise seed ``s_uv`` is HKDF of the X25519 agreement of the mask keys bound to the
   session and to ``{u, v}`` (+ when u < v), all mod ``2^bits``. One ``y_u`` alone is uniform.
4. **unmask**: the server fixes who is summed: every client that sent ``y`` and whose shares reached
   ``threshold`` clients that sent ``y`` and accepted them. A client below that (it garbled
   its shares, or too many holders dropped) is *left out*: its ``y`` is dropped and, in the ``seeds``
   exchange first, each summed neighbour sends the pairwise seed with it (a summed neighbour that
   does not answer is treated as dropped). Then each client that sent ``y`` opens, for each
   neighbour whose shares it holds, the share of ``b`` (summed) or of ``s_seed`` (dropped), with its
   nonce, never both; an opening that fails its dealer's commitment is that holder's fault (its
   openings are ignored). The server rebuilds each summed client's ``b`` (checked against SHA-256(b))
   and each dropped client's mask key (checked against its public key) from ``threshold`` verified
   shares, removes every mask and has ``sum_{summed} x_u``.
5. **repair**: a client whose verified shares rebuild no secret matching its commitment dealt
   inconsistent shares; its summed neighbours send the pairwise seeds with it, and it is left out.

What the server can and cannot do, and with how many colluders: docs/api/privacy.md (Threat model).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..payload import Payload, PayloadSpec, TensorSpec
from . import crypto
from .ring import from_wire, to_wire, wire_dtype

OPENING_BYTES = crypto.SHARE_BYTES + crypto.SEED_BYTES  # a share and its nonce, as a holder opens it
PLAIN_BYTES = 16 + 2 * OPENING_BYTES  # src id, dst id, the openings of the b share and the s share
CT_BYTES = crypto.NONCE_BYTES + PLAIN_BYTES + crypto.TAG_BYTES
COMMIT_BYTES = 32
B, S = 0, 1  # the two shared secrets: the self-mask seed b and the mask-key seed s
PAIR = 2  # SecAggClient.revealed: the pairwise seed with that neighbour went out
STAGES = ("advertise", "share", "masked", "seeds", "unmask", "repair")


class SecAggError(ValueError):
    """A secure-aggregation message is refused or a session cannot go on; says why."""


@dataclass(frozen=True)
class SecAggParams:
    """The public parameters of one session (the same on the server and every client).

    Args:
        participants: sorted client ids taking part.
        length: ring elements per client vector.
        bits: the ring is Z_{2^bits}.
        degree: k, neighbours per client: even, or ``n - 1`` (every other client).
        threshold: how many shares rebuild a secret (1 <= threshold <= k).
        graph_seed: seeds the neighbour graph (drawn by the server for the session).
        session: bytes naming the session (run, round, stage): binds keys, masks and ciphertexts to it.
    """

    participants: tuple[int, ...]
    length: int
    bits: int
    degree: int
    threshold: int
    graph_seed: int
    session: bytes

    def __post_init__(self) -> None:
        n = len(self.participants)
        if n < 2 or list(self.participants) != sorted(set(self.participants)):
            raise ValueError(f"participants must be >= 2 distinct sorted ids, got {self.participants[:8]}...")
        if self.length < 0:
            raise ValueError(f"length must be >= 0, got {self.length}")
        k = self.degree
        if not 1 <= k <= n - 1 or (k != n - 1 and k % 2):
            raise ValueError(f"degree must be even and in [2, {n - 1}], or {n - 1} (every other client); got {k}")
        if not 1 <= self.threshold <= k:
            raise ValueError(f"threshold must lie in [1, {k}] for {k} neighbours, got {self.threshold}")

    @property
    def k(self) -> int:
        return self.degree

    @property
    def max_dropouts(self) -> int:
        """Holders of a client that may fail to answer while its secrets still rebuild: ``k - threshold``."""
        return self.degree - self.threshold

    def info(self, what: bytes) -> bytes:
        return b"fedkernels-secagg-v2|" + self.session + b"|" + what


def _ring(params: SecAggParams) -> list[int]:
    """The participants in the graph's seeded ring order (every party computes the same)."""
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


def _ids(t: torch.Tensor) -> list[int]:
    return [int(i) for i in t.tolist()]


def _matrix(rows: list[bytes], width: int) -> torch.Tensor:
    return _u8(b"".join(rows)).reshape(len(rows), width)


def _id_tensor(ids: list[int]) -> torch.Tensor:
    return torch.tensor(ids, dtype=torch.int64)


def _pair(a: int, b: int) -> bytes:
    return a.to_bytes(8, "little") + b.to_bytes(8, "little")


def _sign(u: int, v: int) -> int:
    return 1 if u < v else -1


def _self_mask(params: SecAggParams, b: bytes) -> torch.Tensor:
    return crypto.mask_stream(crypto.expand(b, params.info(b"self-mask")), params.length, params.bits, b"self")


def mask_key(params: SecAggParams, s_seed: bytes) -> bytes:
    """The X25519 mask private key derived from a client's ``s_seed`` (whoever rebuilds the seed from
    its shares rebuilds the key; the library clamps the bytes into a scalar)."""
    return crypto.expand(s_seed, params.info(b"mask-key"))


def share_key(params: SecAggParams, c_sk: bytes, peer_c_pk: bytes, src: int, dst: int) -> bytes:
    """The key of the share ciphertext ``src -> dst``, bound to the session and to both ids in order."""
    return crypto.agree(c_sk, peer_c_pk, params.info(b"enc") + _pair(src, dst))


def pair_seed(params: SecAggParams, s_sk: bytes, peer_s_pk: bytes, u: int, v: int) -> bytes:
    """The pairwise mask seed of ``{u, v}``, bound to the session and to both ids: a client that
    copies a neighbour's public key gets another seed, so its mask cannot cancel anyone's."""
    return crypto.agree(s_sk, peer_s_pk, params.info(b"mask") + _pair(min(u, v), max(u, v)))


def _pair_mask(params: SecAggParams, seed: bytes) -> torch.Tensor:
    return crypto.mask_stream(seed, params.length, params.bits, b"pair")


def commitment(params: SecAggParams, kind: int, src: int, dst: int, opening: bytes) -> bytes:
    """SHA-256 commitment of dealer ``src`` to the share of secret ``kind`` (B or S) and its nonce
    (``opening``) that it sent holder ``dst``."""
    return crypto.sha256(params.info(b"commit-b" if kind == B else b"commit-s") + _pair(src, dst) + opening)


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
        self.b = crypto.random_bytes(crypto.SEED_BYTES)
        self.peer_c_pk: dict[int, bytes] = {}
        self.peer_s_pk: dict[int, bytes] = {}
        self.masked_with: list[int] = []  # the neighbours whose shares were routed to it: it masked with them
        self.held: dict[int, tuple[bytes, bytes]] = {}  # neighbour -> the openings of its (b, s) shares
        self.revealed: dict[int, int] = {}  # neighbour -> what went out about it: B or S share, or PAIR seed
        self.stage = 0

    @property
    def s_sk(self) -> bytes:
        return mask_key(self.params, self.s_seed)

    def export(self) -> Payload:
        """This client's session secrets and progress as tensors, for a transport that runs each
        message in a fresh process (Flower's deployment engine): they stay on the client's device
        (e.g. its Flower ``context.state``) and :meth:`restore` takes them back."""
        peers, held, shown = sorted(self.peer_s_pk), sorted(self.held), sorted(self.revealed)
        return {
            "c_sk": _u8(self.c_sk),
            "s_seed": _u8(self.s_seed),
            "b": _u8(self.b),
            "stage": _id_tensor([self.stage]),
            "peers": _id_tensor(peers),
            "peer_c_pk": _matrix([self.peer_c_pk[v] for v in peers], crypto.KEY_BYTES),
            "peer_s_pk": _matrix([self.peer_s_pk[v] for v in peers], crypto.KEY_BYTES),
            "masked_with": _id_tensor(self.masked_with),
            "held": _id_tensor(held),
            "openings": _matrix([self.held[u][0] + self.held[u][1] for u in held], 2 * OPENING_BYTES),
            "revealed": _id_tensor(shown),
            "revealed_kind": _id_tensor([self.revealed[u] for u in shown]),
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
        self.b = bytes(saved["b"].numpy().tobytes())
        self.stage = int(saved["stage"][0])
        peers = _ids(saved["peers"])
        self.peer_c_pk = dict(zip(peers, _rows(saved["peer_c_pk"]), strict=True))
        self.peer_s_pk = dict(zip(peers, _rows(saved["peer_s_pk"]), strict=True))
        self.masked_with = _ids(saved["masked_with"])
        n = OPENING_BYTES
        self.held = {u: (r[:n], r[n:]) for u, r in zip(_ids(saved["held"]), _rows(saved["openings"]), strict=True)}
        self.revealed = dict(zip(_ids(saved["revealed"]), _ids(saved["revealed_kind"]), strict=True))
        return self

    def _step(self, want: int) -> None:
        if self.stage != want:
            raise SecAggError(f"client {self.id}: message for stage {want + 1} arrived at stage {self.stage + 1}")
        self.stage += 1

    def advertise(self) -> Payload:
        """Stage 1: both public keys and the self-mask commitment."""
        self._step(0)
        return {
            "c_pk": _u8(crypto.public_key(self.c_sk)),
            "s_pk": _u8(crypto.public_key(self.s_sk)),
            "b_commit": _u8(crypto.sha256(self.b)),
        }

    def share_keys(self, msg: Payload) -> Payload:
        """Stage 2: for each live neighbour the server lists, the encrypted shares of ``b`` and
        ``s_seed`` and the commitments to them. Refuses a list that is not a subset of the public
        graph, too short to rebuild the secrets, or that holds a key twice (or one of its own)."""
        self._step(1)
        ids = _ids(msg["ids"])
        if not set(ids) <= set(self.neighbours) or len(set(ids)) != len(ids):
            raise SecAggError(f"client {self.id}: the server's neighbour list is not a subset of the public graph's")
        if len(ids) < self.params.threshold:
            raise SecAggError(
                f"client {self.id}: only {len(ids)} live neighbours, fewer than the {self.params.threshold} "
                "needed to rebuild its secrets"
            )
        c_pk, s_pk = _rows(msg["c_pk"]), _rows(msg["s_pk"])
        own = {crypto.public_key(self.c_sk), crypto.public_key(self.s_sk)}
        if len(set(c_pk) | set(s_pk) | own) != 2 * len(ids) + 2:
            raise SecAggError(f"client {self.id}: the server lists a public key twice (a copied key)")
        self.peer_c_pk = dict(zip(ids, c_pk, strict=True))
        self.peer_s_pk = dict(zip(ids, s_pk, strict=True))
        k, r, p = len(self.neighbours), self.params.threshold, self.params
        b_shares, s_shares = crypto.split_secret(self.b, r, k), crypto.split_secret(self.s_seed, r, k)
        cts, commits = [], []
        for v in ids:
            j = self.neighbours.index(v)  # holder index j + 1, fixed by the public graph
            b_open = b_shares[j] + crypto.random_bytes(crypto.SEED_BYTES)
            s_open = s_shares[j] + crypto.random_bytes(crypto.SEED_BYTES)
            key = share_key(p, self.c_sk, self.peer_c_pk[v], self.id, v)
            cts.append(crypto.encrypt(key, _pair(self.id, v) + b_open + s_open, p.info(b"share") + _pair(self.id, v)))
            commits.append(commitment(p, B, self.id, v, b_open) + commitment(p, S, self.id, v, s_open))
        return {"ids": _id_tensor(ids), "cts": _matrix(cts, CT_BYTES), "commits": _matrix(commits, 2 * COMMIT_BYTES)}

    def _open(self, u: int, ct: bytes, commits: bytes) -> tuple[bytes, bytes] | None:
        """The openings neighbour ``u`` sent, or None if its ciphertext or a commitment does not check out."""
        p = self.params
        try:
            key = share_key(p, self.c_sk, self.peer_c_pk[u], u, self.id)
            plain = crypto.decrypt(key, ct, p.info(b"share") + _pair(u, self.id))
        except crypto.CryptoError:
            return None
        b_open, s_open = plain[16 : 16 + OPENING_BYTES], plain[16 + OPENING_BYTES :]
        if (
            plain[:16] != _pair(u, self.id)
            or commitment(p, B, u, self.id, b_open) != commits[:COMMIT_BYTES]
            or commitment(p, S, u, self.id, s_open) != commits[COMMIT_BYTES:]
        ):
            return None
        return b_open, s_open

    def masked_input(self, msg: Payload, x: torch.Tensor) -> Payload:
        """Stage 3: open the shares routed to this client (``ids``, ``cts``, ``commits``), then
        ``y = x + masks`` (ring int64 ``x [length]``) and the senders whose shares it rejected."""
        self._step(2)
        p = self.params
        if x.shape != (p.length,) or x.dtype != torch.int64:
            raise ValueError(f"x must be int64 [{p.length}] ring elements, got {x.dtype} {tuple(x.shape)}")
        ids = _ids(msg["ids"])
        if not set(ids) <= set(self.peer_s_pk) or len(set(ids)) != len(ids):
            raise SecAggError(f"client {self.id}: shares routed from clients that are not live neighbours")
        rejected = []
        for u, ct, commits in zip(ids, _rows(msg["cts"]), _rows(msg["commits"]), strict=True):
            got = self._open(u, ct, commits)
            if got is None:
                rejected.append(u)
            else:
                self.held[u] = got
        self.masked_with = ids
        mod, s_sk = (1 << p.bits) - 1, self.s_sk
        y = (x + _self_mask(p, self.b)) & mod
        for u in ids:  # pairwise masks with the neighbours that shared keys (they cancel between summed clients)
            m = _pair_mask(p, pair_seed(p, s_sk, self.peer_s_pk[u], self.id, u))
            y = (y + m if _sign(self.id, u) > 0 else y - m) & mod
        return {"y": to_wire(y, p.bits), "rejected": _id_tensor(rejected)}

    def seeds(self, msg: Payload) -> Payload:
        """The ``seeds`` and ``repair`` stages: the pairwise seed with each neighbour in ``left_out``
        that this client masked with. The server asks this for a neighbour whose own shares cannot
        rebuild its secrets (it garbled or dealt inconsistent ones, or too few holders accepted them)
        and whose ``y`` is therefore not summed: the seed lets the server take that neighbour's mask out
        of this client's ``y``. A client cannot check the claim (docs/api/privacy.md: the server is
        trusted to follow the protocol); it never sends a seed before its masked input, and never
        opens a share of a neighbour after sending their seed."""
        if self.stage < 3:
            raise SecAggError(f"client {self.id}: pairwise seeds asked for before its masked input")
        ids = sorted(set(_ids(msg["left_out"])))
        if not set(ids) <= set(self.masked_with):
            raise SecAggError(f"client {self.id}: the server asks for seeds of clients it did not mask with")
        p, s_sk = self.params, self.s_sk
        out = [pair_seed(p, s_sk, self.peer_s_pk[u], self.id, u) for u in ids]
        self.revealed.update(dict.fromkeys(ids, PAIR))
        return {"seed_ids": _id_tensor(ids), "seeds": _matrix(out, crypto.KEY_BYTES)}

    def unmask(self, msg: Payload) -> Payload:
        """Stage 4: for each neighbour whose shares it holds, the opening of its ``b`` share if the
        server lists it as ``summed`` or of its ``s`` share if ``dropped``; one kind per neighbour, once."""
        if self.stage != 3:
            raise SecAggError(f"client {self.id}: unmask message at stage {self.stage + 1}")
        self.stage = 4
        summed, dropped = set(_ids(msg["summed"])), set(_ids(msg["dropped"]))
        if summed & dropped or not (summed | dropped) <= set(self.held):
            raise SecAggError(f"client {self.id}: the server lists clients as both summed and dropped, or unknown")
        if any(u in self.revealed for u in summed | dropped):
            raise SecAggError(f"client {self.id}: the server asks again about a neighbour it answered for")
        if len(summed) + 1 < self.params.threshold:  # its own input must not be summed with too few others
            raise SecAggError(f"client {self.id}: {len(summed)} summed neighbours and itself, fewer than the threshold")
        ids = sorted(summed | dropped)
        kinds = [B if u in summed else S for u in ids]
        self.revealed.update(zip(ids, kinds, strict=True))
        return {
            "ids": _id_tensor(ids),
            "kind": torch.tensor(kinds, dtype=torch.uint8),
            "openings": _matrix([self.held[u][kind] for u, kind in zip(ids, kinds, strict=True)], OPENING_BYTES),
        }


# ---- server side -----------------------------------------------------------------------------------


def _key_spec() -> TensorSpec:
    return TensorSpec(torch.uint8, (crypto.KEY_BYTES,))


def _id_spec(limit: int, dim: str) -> TensorSpec:
    return TensorSpec(torch.int64, (dim,), max_numel=limit, min_value=0, unique=True)


def _rows_spec(width: int, limit: int, dim: str) -> TensorSpec:
    return TensorSpec(torch.uint8, (dim, width), max_numel=limit * width)


@dataclass
class SecAggServer:
    """The server's side of one session: builds each stage's messages from the previous replies and
    rebuilds the sum at the end. Replies are decoded payloads already checked against the stage's
    :meth:`spec` (what :meth:`fedkernels.fl.payload.decode` does with it); content checks happen here
    and raise :class:`SecAggError`, which leaves out the sender and no one else.

    :attr:`summed` (after :meth:`unmask_messages`, final after :meth:`result`) holds the clients
    whose vectors are in the sum; :attr:`left_out` why each other client that sent its masked vector
    is not; :attr:`faults` the summed clients whose unmask answer was refused (their input, already
    masked under a seed their holders opened, stays in the sum; their openings are ignored).
    """

    params: SecAggParams
    graph: dict[int, list[int]] = field(init=False)
    keys: dict[int, tuple[bytes, bytes, bytes]] = field(default_factory=dict)  # U1: c_pk, s_pk, b_commit
    cts: dict[int, dict[int, bytes]] = field(default_factory=dict)  # U2: sender -> {receiver: ct}
    commits: dict[int, dict[int, bytes]] = field(default_factory=dict)  # sender -> {receiver: b and s commitments}
    routed: dict[int, list[int]] = field(default_factory=dict)  # receiver -> senders whose shares it got
    ys: dict[int, torch.Tensor] = field(default_factory=dict)  # U3: masked inputs
    rejected: dict[int, set[int]] = field(default_factory=dict)  # receiver -> senders whose shares it refused
    summed: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)  # shared keys, not summed: masks rebuilt from s shares
    left_out: dict[int, str] = field(default_factory=dict)
    faults: dict[int, str] = field(default_factory=dict)
    openings: dict[int, dict[int, tuple[int, bytes]]] = field(
        default_factory=dict
    )  # owner -> {holder: (kind, opening)}
    seeds: dict[int, dict[int, bytes]] = field(default_factory=dict)  # summed client -> {left-out neighbour: seed}
    _asked: dict[int, list[int]] = field(default_factory=dict)  # the seeds/repair question of each client
    _unmask: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)
    _secrets: dict[int, bytes] = field(default_factory=dict)  # summed: b; dropped: the mask private key
    _failure: str = ""  # why the sum cannot be had (set by repair_messages)

    def __post_init__(self) -> None:
        self.graph = neighbour_graph(self.params)

    def spec(self, stage: str, client: int) -> PayloadSpec:
        """What a well-formed reply of ``client`` at ``stage`` looks like (sizes fixed by the session)."""
        k = self.params.k
        if stage == "advertise":
            return PayloadSpec({"c_pk": _key_spec(), "s_pk": _key_spec(), "b_commit": _key_spec()})
        if stage == "share":
            return PayloadSpec(
                {
                    "ids": _id_spec(k, "n"),
                    "cts": _rows_spec(CT_BYTES, k, "n"),
                    "commits": _rows_spec(2 * COMMIT_BYTES, k, "n"),
                }
            )
        if stage == "masked":
            y = TensorSpec(wire_dtype(self.params.bits), (self.params.length,))
            return PayloadSpec({"y": y, "rejected": _id_spec(k, "r")})
        if stage in ("seeds", "repair"):
            return PayloadSpec({"seed_ids": _id_spec(k, "d"), "seeds": _rows_spec(crypto.KEY_BYTES, k, "d")})
        if stage == "unmask":
            return PayloadSpec(
                {
                    "ids": _id_spec(k, "m"),
                    "kind": TensorSpec(torch.uint8, ("m",), max_numel=k, min_value=0, max_value=2),  # B or S
                    "openings": _rows_spec(OPENING_BYTES, k, "m"),
                }
            )
        raise ValueError(f"unknown stage {stage!r}")

    # stage 1
    def take_advertise(self, client: int, reply: Payload) -> None:
        """A client's public keys and commitment (the client joins U1), unless a key is unusable or
        already advertised: then SecAggError, and only this client is left out."""
        c_pk, s_pk = bytes(reply["c_pk"].numpy().tobytes()), bytes(reply["s_pk"].numpy().tobytes())
        for pk in (c_pk, s_pk):
            try:
                crypto.check_public_key(pk)
            except crypto.CryptoError as e:
                raise SecAggError(f"client {client} advertised an unusable public key ({e})") from None
        if c_pk == s_pk:
            raise SecAggError(f"client {client} advertised one public key twice")
        for other, (c, s, _) in self.keys.items():
            if {c, s} & {c_pk, s_pk}:
                raise SecAggError(f"client {client} advertised a public key of client {other} (a copied key)")
        self.keys[client] = (c_pk, s_pk, bytes(reply["b_commit"].numpy().tobytes()))

    def share_messages(self) -> dict[int, Payload]:
        """Stage 2 messages: each U1 client's live neighbours and their public keys."""
        out = {}
        for c in sorted(self.keys):
            live = [v for v in self.graph[c] if v in self.keys]
            out[c] = {
                "ids": _id_tensor(live),
                "c_pk": _matrix([self.keys[v][0] for v in live], crypto.KEY_BYTES),
                "s_pk": _matrix([self.keys[v][1] for v in live], crypto.KEY_BYTES),
            }
        return out

    # stage 2
    def take_shares(self, client: int, reply: Payload) -> None:
        """A client's encrypted shares and commitments, one per live neighbour (it joins U2)."""
        want = [v for v in self.graph[client] if v in self.keys]
        got = _ids(reply["ids"])
        if client not in self.keys or got != want:
            raise SecAggError(f"client {client} sent shares for {got}, expected its live neighbours {want}")
        self.cts[client] = dict(zip(got, _rows(reply["cts"]), strict=True))
        self.commits[client] = dict(zip(got, _rows(reply["commits"]), strict=True))

    def masked_messages(self) -> dict[int, Payload]:
        """Stage 3 messages: the shares (and commitments) addressed to each U2 client from U2 senders."""
        out = {}
        for v in sorted(self.cts):
            senders = [u for u in self.graph[v] if u in self.cts and v in self.cts[u]]
            self.routed[v] = senders
            out[v] = {
                "ids": _id_tensor(senders),
                "cts": _matrix([self.cts[u][v] for u in senders], CT_BYTES),
                "commits": _matrix([self.commits[u][v] for u in senders], 2 * COMMIT_BYTES),
            }
        return out

    # stage 3
    def take_masked(self, client: int, reply: Payload) -> None:
        """A client's masked vector and the senders whose shares it rejected (it joins U3)."""
        if client not in self.routed:
            raise SecAggError(f"client {client} sent a masked input without having shared keys")
        rejected = set(_ids(reply["rejected"]))
        if not rejected <= set(self.routed[client]):
            raise SecAggError(f"client {client} rejected shares it was never sent")
        self.ys[client] = from_wire(reply["y"], self.params.bits)
        self.rejected[client] = rejected

    def _holders(self, u: int) -> list[int]:
        """The U3 clients that got ``u``'s shares and accepted them."""
        return [v for v in self.graph[u] if v in self.ys and u in self.routed[v] and u not in self.rejected[v]]

    def seeds_messages(self) -> dict[int, Payload]:
        """The ``seeds`` messages (empty when nobody needs them). Fixes who is summed: U3 less each
        client whose shares did not reach ``threshold`` accepting U3 clients (left out, its ``y``
        dropped: its secrets cannot be rebuilt). The masks of those, and of dropped U2 clients with as
        few accepting holders, come out through pairwise seeds: each summed client that masked with
        one is asked for their seed."""
        r = self.params.threshold
        gone = set()
        for u in sorted(self.cts):
            holders = self._holders(u)
            if len(holders) >= r:
                continue
            gone.add(u)
            if u in self.ys:
                refused = sum(1 for v in self.graph[u] if v in self.rejected and u in self.rejected[v])
                self.left_out[u] = f"its shares reached {len(holders)} of the {r} holders that must accept them" + (
                    f" ({refused} rejected them as garbled)" if refused else ""
                )
        self.summed = [u for u in sorted(self.ys) if u not in gone]
        self.dropped = [u for u in sorted(self.cts) if u not in self.ys and u not in gone]
        return self._ask_seeds(self.summed, gone)

    def _ask_seeds(self, ask: list[int], gone: set[int]) -> dict[int, Payload]:
        self._asked = {v: [u for u in self.routed[v] if u in gone] for v in ask}
        self._asked = {v: us for v, us in self._asked.items() if us}
        return {v: {"left_out": _id_tensor(us)} for v, us in self._asked.items()}

    def take_seeds(self, client: int, reply: Payload) -> None:
        """A summed client's pairwise seeds with its left-out neighbours (``seeds`` and ``repair`` stages)."""
        want = self._asked.get(client)
        got = _ids(reply["seed_ids"])
        if want is None or got != want:  # it stays asked: as if it had not answered
            raise SecAggError(f"client {client} sent pairwise seeds for {got}, asked for {want}")
        del self._asked[client]
        self.seeds.setdefault(client, {}).update(zip(got, _rows(reply["seeds"]), strict=True))

    def unmask_messages(self) -> dict[int, Payload]:
        """Stage 4 messages. A summed client asked for seeds that did not send them joins the dropped
        (its masks come out through its ``s`` shares; its ``b`` is never opened). To each U3 client:
        which neighbours whose shares it holds are summed (open ``b``) and which dropped (open ``s``)."""
        late = set(self._asked)
        self.dropped = sorted({*self.dropped, *late})
        self.summed = [u for u in self.summed if u not in late]
        summed, dropped = set(self.summed), set(self.dropped)
        out = {}
        for v in sorted(self.ys):
            held = [u for u in self.routed[v] if u not in self.rejected[v]]
            ask = ([u for u in held if u in summed], [u for u in held if u in dropped])
            self._unmask[v] = ask
            out[v] = {"summed": _id_tensor(ask[0]), "dropped": _id_tensor(ask[1])}
        return out

    # stage 4
    def take_unmask(self, client: int, reply: Payload) -> None:
        """A U3 client's openings, each checked against its dealer's commitment: one mismatch refuses
        the whole answer (the holder's fault; a summed holder stays summed, see :attr:`faults`)."""
        if client not in self._unmask:
            raise SecAggError(f"client {client} sent an unmask answer it was not asked for")
        summed, dropped = self._unmask[client]
        got, kinds = _ids(reply["ids"]), _ids(reply["kind"])
        want = sorted(summed + dropped)
        if got != want or any(kind != (B if u in summed else S) for u, kind in zip(got, kinds, strict=True)):
            raise SecAggError(f"client {client} opened shares of {got}, asked for {want}")
        opened = dict(zip(got, _rows(reply["openings"]), strict=True))
        for u, kind in zip(got, kinds, strict=True):
            commit = self.commits[u][client]
            if commitment(self.params, kind, u, client, opened[u]) != commit[kind * COMMIT_BYTES :][:COMMIT_BYTES]:
                if client in self.summed:
                    self.faults[client] = f"opened a share of client {u} that fails its commitment"
                raise SecAggError(f"client {client} opened a share of client {u} that fails its commitment")
        for u, kind in zip(got, kinds, strict=True):
            self.openings.setdefault(u, {})[client] = (kind, opened[u])

    def _rebuild(self, u: int, kind: int) -> bytes | None:
        """Secret ``kind`` of ``u`` from the first ``threshold`` verified openings, or None (too few:
        SecAggError) if they do not match its commitment (an inconsistent dealer)."""
        r = self.params.threshold
        got = {v: o for v, (k, o) in self.openings.get(u, {}).items() if k == kind}
        if len(got) < r:
            what = "self-mask seed" if kind == B else "mask key"
            raise SecAggError(
                f"cannot unmask: client {u}'s {what} has {len(got)} of the {r} shares needed (too many "
                f"dropouts: at most {self.params.max_dropouts} of a client's holders may fail to answer)"
            )
        pos = {v: i + 1 for i, v in enumerate(self.graph[u])}  # the holder index u gave each share
        secret = crypto.combine_shares({pos[v]: o[: crypto.SHARE_BYTES] for v, o in got.items()}, r)
        if kind == B:
            return secret if crypto.sha256(secret) == self.keys[u][2] else None
        sk = mask_key(self.params, secret)
        return sk if crypto.public_key(sk) == self.keys[u][1] else None

    def repair_messages(self) -> dict[int, Payload]:
        """The ``repair`` messages (empty when nothing needs repair): rebuilds every summed client's
        ``b`` and dropped client's mask key; one whose verified shares rebuild a secret that fails its
        commitment dealt inconsistent shares: it is left out, and each summed client that masked with
        it is asked for their pairwise seed. A secret without ``threshold`` verified shares (too many
        dropouts) makes :meth:`result` fail."""
        bad = set()
        for kind, owners in ((B, self.summed), (S, self.dropped)):
            for u in owners:
                try:
                    secret = self._rebuild(u, kind)
                except SecAggError as e:
                    self._failure = str(e)
                    return {}
                if secret is None:
                    bad.add(u)
                    self.left_out[u] = "its verified shares rebuild a secret that fails its commitment"
                else:
                    self._secrets[u] = secret
        self.summed = [u for u in self.summed if u not in bad]
        self.dropped = [u for u in self.dropped if u not in bad]
        return self._ask_seeds(self.summed, bad)

    def result(self) -> torch.Tensor:
        """The sum over :attr:`summed` of their vectors, int64 ring elements ``[length]``.

        Raises:
            SecAggError: nobody to sum, or a summed client that did not send a pairwise seed the sum
                needs (the message names it).
        """
        p = self.params
        if self._failure:
            raise SecAggError(self._failure)
        if self._asked:
            who = sorted(self._asked)
            raise SecAggError(f"cannot unmask: client {who[0]} did not send the pairwise seeds asked of it")
        if not self.summed:
            raise SecAggError("no client sent a masked input that can be unmasked")
        mod = (1 << p.bits) - 1
        total = torch.zeros(p.length, dtype=torch.int64)
        summed = set(self.summed)
        for v in self.summed:
            total = (total + self.ys[v] - _self_mask(p, self._secrets[v])) & mod
            for u in self.routed[v]:
                if u in summed:
                    continue
                if u in self.seeds.get(v, {}):
                    seed = self.seeds[v][u]
                else:  # u dropped: its mask key was rebuilt from its s shares
                    seed = pair_seed(p, self._secrets[u], self.keys[v][1], u, v)
                m = _pair_mask(p, seed)
                total = (total - m if _sign(v, u) > 0 else total + m) & mod  # v added sign(v, u) * mask
        return total
