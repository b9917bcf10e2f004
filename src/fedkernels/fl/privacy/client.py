"""The client side of a private round: local training, the contribution, DP noise, SecAgg+ answers.

A :class:`PrivateClient` answers ``handle(kind, round, seed, message) -> reply`` with bytes only, so the
same object serves in-process (:class:`~fedkernels.fl.privacy.server.PrivateServer`) and behind a
Flower SuperNode (:mod:`fedkernels.integrations.flower.private_client`). Kinds: ``"count"`` (its
example count, the weight's numerator), ``"train"`` (the round's download; reply: an acknowledgement
under secure aggregation, or the contribution itself in the clear for central DP) and
``"<session>/<stage>"`` for the SecAgg+ sessions ``req`` (the private request union) and ``upd``
(the update sum), stages ``advertise``, ``share``, ``masked``, ``unmask``.

A transport that runs every message in a fresh process keeps the round's secrets on the client
between messages with :meth:`PrivateClient.export` / :meth:`PrivateClient.restore`.

What stays on the client: its data, its request, its contribution in the clear, its DP noise, its
secret keys and mask seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .. import payload as pl
from ..seeding import derive_seed
from ..strategy import Strategy
from ..types import ClientData, TrainConfig
from . import dp
from .forms import DenseForm, RowsForm
from .ring import RingCodec
from .secagg import SecAggClient, SecAggParams

CTL = "__ctl"  # float64 [4] in a train message: weight (-1: unweighted), clip (0: none), noise std, central (1/0)
SESSION_STAGES = ("advertise", "share", "masked", "unmask")
SESSIONS = ("req", "upd")
COUNT, TRAIN = "count", "train"
NUM_EXAMPLES = "num_examples"  # int64 [1]: the reply to a count message
ACK = "ok"  # uint8 [1]: the reply to a train message under secure aggregation


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


def session_header(params: SecAggParams, bound: float) -> pl.Payload:
    """A session's public parameters and encoding bound: the ``advertise`` message (the same for every
    participant). The participants travel as a bitmap over client ids (one bit per client of the run:
    125 bytes at 1000 clients), so each client can recompute and check the neighbour graph."""
    member = torch.zeros(max(params.participants) + 1, dtype=torch.uint8)
    member[list(params.participants)] = 1
    degree = -1 if params.degree is None else params.degree
    return {
        "members": torch.from_numpy(np.packbits(member.numpy())),
        "config": torch.tensor(
            [params.length, params.bits, params.max_dropouts, params.graph_seed, degree], dtype=torch.int64
        ),
        "session": torch.frombuffer(bytearray(params.session), dtype=torch.uint8),
        "bound": torch.tensor([bound], dtype=torch.float64),
    }


def session_params(message: pl.Payload) -> tuple[SecAggParams, float]:
    """The public session parameters and the encoding bound of an ``advertise`` message (the inverse
    of :func:`session_header`)."""
    cfg = [int(v) for v in message["config"].tolist()]
    length, bits, max_dropouts, graph_seed, degree = cfg
    members = np.unpackbits(message["members"].numpy()).nonzero()[0]
    params = SecAggParams(
        tuple(int(c) for c in members),
        length,
        bits,
        max_dropouts,
        graph_seed,
        bytes(message["session"].numpy().tobytes()),
        None if degree < 0 else degree,
    )
    return params, float(message["bound"][0])


def message_kinds() -> tuple[str, ...]:
    """Every message kind :meth:`PrivateClient.handle` answers."""
    return (COUNT, TRAIN, *(f"{s}/{stage}" for s in SESSIONS for stage in SESSION_STAGES))


@dataclass
class _Session:
    client: SecAggClient
    codec: RingCodec
    x: torch.Tensor  # the float64 vector this client sums
    advertise: pl.Payload  # the session's public parameters, as the server sent them


class PrivateClient:
    """One client of a private run.

    Args:
        client_id: this client.
        strategy: the algorithm (client side only).
        form: its round as sums (:func:`~fedkernels.fl.privacy.forms.form_of`).
        data: this client's data.
        train: local training settings.
        noise_seed: None (DP noise from the OS's CSPRNG: the private choice) or a seed for
            reproducible experiments.
    """

    def __init__(
        self,
        client_id: int,
        strategy: Strategy,
        form: DenseForm,
        data: ClientData,
        train: TrainConfig,
        noise_seed: int | None = None,
    ) -> None:
        self.id, self.strategy, self.form, self.data, self.train = client_id, strategy, form, data, train
        self.noise_seed = noise_seed
        self._round = -1
        self._request: pl.Payload | None = None
        self._vector: torch.Tensor | None = None  # the contribution, flat float64, in the clear
        self._sessions: dict[str, _Session] = {}

    def _at(self, round: int) -> None:
        if round != self._round:  # a new round forgets the last one's secrets and vectors
            self._round, self._request, self._vector, self._sessions = round, None, None, {}

    def _request_of(self, round: int, seed: int) -> pl.Payload | None:
        if self._request is None:
            self._request = self.strategy.client_request(self.data, round, seed)
        return self._request

    def handle(self, kind: str, round: int, seed: int, message: bytes) -> bytes:
        """Answer one server message of ``round`` (bytes in, bytes out)."""
        self._at(round)
        msg = pl.decode(message)
        if kind == COUNT:
            return pl.encode({NUM_EXAMPLES: torch.tensor([len(self.data)], dtype=torch.int64)})
        if kind == TRAIN:
            return self._train(msg, round, seed)
        session, _, stage = kind.partition("/")
        if session not in SESSIONS or stage not in SESSION_STAGES:
            raise ValueError(f"unknown message kind {kind!r}")
        if stage == "advertise":
            params, bound = session_params(msg)
            vec = self._session_vector(session, round, seed, params.length)
            codec = RingCodec(params.bits, len(params.participants), bound)
            s = self._sessions[session] = _Session(SecAggClient(self.id, params), codec, vec, msg)
            return pl.encode(s.client.advertise())
        s = self._sessions.get(session)  # type: ignore[assignment]
        if s is None:
            raise ValueError(f"no {session} session in round {round}")
        if stage == "share":
            return pl.encode(s.client.share_keys(msg))
        if stage == "masked":
            return pl.encode(s.client.masked_input(msg, s.codec.encode(s.x)))
        return pl.encode(s.client.unmask(msg))

    def _session_vector(self, session: str, round: int, seed: int, length: int) -> torch.Tensor:
        if session == "req":
            if not isinstance(self.form, RowsForm):
                raise ValueError("this strategy has no request union")
            vec = self.form.indicator(self._request_of(round, seed), length)["requested"]
        else:
            if self._vector is None:
                raise ValueError("the update session came before this client trained")
            vec = self._vector
        if vec.numel() != length:
            raise ValueError(f"the session sums {length} values, this client's vector has {vec.numel()}")
        return vec

    def _train(self, msg: pl.Payload, round: int, seed: int) -> bytes:
        ctl = msg.pop(CTL).double().tolist()
        a, clip_bound, noise_std, central = ctl
        weight = None if a < 0 else a
        request = self._request_of(round, seed) if isinstance(self.form, RowsForm) else None
        local = self.form.local_payload(msg, request)
        upload = self.strategy.client_update(local, self.data, self.train, round, seed)
        x = self.form.contribution(msg, upload, weight, request)
        if clip_bound > 0:
            x = dp.clip(x, clip_bound)
        if noise_std > 0:  # distributed DP: this client's share of the noise
            gen = dp.noise_generator(None if self.noise_seed is None else derive_seed(self.noise_seed, round, self.id))
            x = {n: t + z for (n, t), z in zip(x.items(), dp.gaussian_like(x, noise_std, gen).values(), strict=True)}
        if central:  # central DP: the server sees, clips and noises the contribution
            return pl.encode({n: t.float() for n, t in x.items()})
        self._vector = flatten(x, {n: tuple(x[n].shape) for n in sorted(x)})  # the server's layout order
        return pl.encode({ACK: torch.ones(1, dtype=torch.uint8)})

    # ---- keeping the round's secrets between messages ----------------------------------------------
    def export(self) -> bytes:
        """What this client holds for the current round (its request, its contribution in the clear,
        each session's parameters, secrets and vector) as bytes for :meth:`restore`. They are the
        client's secrets: keep them on the client (Flower: the node's ``context.state``)."""
        # small tensors are cloned: views of one received buffer must not share memory when saved
        out: pl.Payload = {"round": torch.tensor([self._round], dtype=torch.int64)}
        if self._request is not None:
            out.update({f"request/{n}": t.clone() for n, t in self._request.items()})
        if self._vector is not None:
            out["vector"] = self._vector
        for name, s in self._sessions.items():
            out.update({f"{name}/advertise/{n}": t.clone() for n, t in s.advertise.items()})
            out.update({f"{name}/secagg/{n}": t for n, t in s.client.export().items()})
            out[f"{name}/session"] = torch.ones(1, dtype=torch.uint8)
            if name != "upd":  # the update session sums the vector itself
                out[f"{name}/x"] = s.x
        return pl.encode(out)

    def restore(self, saved: bytes) -> None:
        """Take back what :meth:`export` saved (the next message of another round forgets it)."""
        got = pl.decode(saved)

        def part(prefix: str) -> pl.Payload:
            return {n[len(prefix) :]: t for n, t in got.items() if n.startswith(prefix)}

        self._round = int(got["round"][0])
        request = part("request/")
        self._request = request if request else None
        self._vector = got.get("vector")
        self._sessions = {}
        for name in SESSIONS:
            if f"{name}/session" in got:
                advert = part(f"{name}/advertise/")
                params, bound = session_params(advert)
                sa = SecAggClient.restore(self.id, params, part(f"{name}/secagg/"))
                codec = RingCodec(params.bits, len(params.participants), bound)
                x = got[f"{name}/x"] if name != "upd" else self._vector
                if x is None:
                    raise ValueError(f"saved state of round {self._round} has a {name} session without its vector")
                self._sessions[name] = _Session(sa, codec, x, advert)
