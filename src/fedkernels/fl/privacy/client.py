"""The client side of a private round: local training, the contribution, DP noise, SecAgg+ answers.

A :class:`PrivateClient` answers ``handle(kind, round, seed, message) -> reply`` with bytes only, so the
same object serves in-process (:class:`~fedkernels.fl.privacy.server.PrivateServer`) and behind a
Flower SuperNode (:mod:`fedkernels.integrations.flower.private_client`). Kinds: ``"train"`` (the
round's download with this client's weight cap, clip and noise share; reply: an acknowledgement
under secure aggregation, or the contribution itself in the clear for central DP), ``"eval"`` (a
federated evaluation's download: the report is summed securely) and ``"<session>/<stage>"`` for the
SecAgg+ sessions ``req`` (the private request union), ``upd`` (the update sum) and ``evl`` (the
evaluation sum), stages :data:`~.secagg.STAGES`.

A client trains at most once a round and joins each session at most once a round, and never answers
a round older than one it has answered: a server that ran two update sessions over the same
contribution could subtract their sums.

A transport that runs every message in a fresh process keeps the round's secrets on the client
between messages with :meth:`PrivateClient.export` / :meth:`PrivateClient.restore`.

What stays on the client: its data and example count, its request, its contribution in the clear,
its DP noise, its evaluation report, its secret keys and mask seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from .. import evaluation as ev
from .. import payload as pl
from ..device import to_device
from ..seeding import derive_seed
from ..strategy import Strategy
from ..types import ClientData, TrainConfig
from . import dp
from .forms import DenseForm, RowsForm
from .ring import RingCodec
from .secagg import STAGES, SecAggClient, SecAggError
from .session import flatten, session_params

CTL = "__ctl"  # float64 [4] in a train message: weight cap (-1: unweighted), clip (0: none), noise std, central (1/0)
EVAL_CTL = "__eval_ctl"  # float64 [1] in an eval message: the weight cap
EVAL_KS = "__eval_ks"  # int64 [n] in an eval message: the ks to rank at
SESSIONS = ("req", "upd", "evl")
TRAIN, EVAL, COUNT = "train", "eval", "count"
NUM_EXAMPLES = "num_examples"  # int64 [1]: the reply to a count message (DP-SGD only)
ACK = "ok"  # uint8 [1]: the reply to a train or eval message under secure aggregation


def client_weight(num_examples: int, cap: float) -> float:
    """A client's weight in a weighted secure sum: ``min(examples, cap) / cap`` in [0, 1]. The client
    computes it from its own count, which never leaves it; the server sees only sums of weights
    (``cap`` is public: 1 weighs every client with data equally)."""
    return min(num_examples, cap) / cap


def evaluation_vector(report: bytes, cap: float) -> torch.Tensor:
    """A client's evaluation report as the vector an ``evl`` session sums: its metric means and 1,
    all times its weight (:func:`client_weight` of its held-out count), float64 ``[metrics + 1]``."""
    rep = pl.decode(report)
    a = client_weight(int(rep["num_examples"][0]), cap)
    return torch.cat([rep["metrics"].double(), torch.ones(1, dtype=torch.float64)]) * a


def message_kinds() -> tuple[str, ...]:
    """Every message kind :meth:`PrivateClient.handle` answers."""
    return (TRAIN, EVAL, COUNT, *(f"{s}/{stage}" for s in SESSIONS for stage in STAGES))


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
        data: this client's data, or a callable that reads it (called each time the client needs it:
            a population in a :class:`~fedkernels.data.client_store.ClientStore` stays on disk).
        train: local training settings.
        noise_seed: None (DP noise from the OS's CSPRNG: the private choice) or a seed for
            reproducible experiments.
        held_out: this client's held-out data for federated evaluation (a callable, read only when
            an ``eval`` message comes), or None (an ``eval`` message is then refused).
        device: where it trains (:class:`~fedkernels.fl.client.LocalClient`'s): its data and download go
            there for local training; the upload comes back to the host, where the contribution, its clip,
            weight, noise and masking are made whatever the device.
    """

    def __init__(
        self,
        client_id: int,
        strategy: Strategy,
        form: DenseForm,
        data: ClientData | Callable[[], ClientData],
        train: TrainConfig,
        noise_seed: int | None = None,
        held_out: Callable[[], ClientData] | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.id, self.strategy, self.form, self.train = client_id, strategy, form, train
        self._data = data
        self.device = torch.device(device)
        self.noise_seed, self.held_out = noise_seed, held_out
        self._round = -1
        self._request: pl.Payload | None = None
        self._vector: torch.Tensor | None = None  # the contribution, flat float64, in the clear
        self._report: torch.Tensor | None = None  # the evaluation vector, in the clear
        self._done: set[str] = set()  # what this round already had: "train", "eval" and sessions joined
        self._sessions: dict[str, _Session] = {}

    @property
    def data(self) -> ClientData:
        """This client's data (read again each time when it was given as a callable)."""
        return self._data() if callable(self._data) else self._data

    def end_round(self) -> None:
        """Drop what this client holds for its round (its contribution and report in the clear, its
        request, its sessions' secrets): nothing reads them once the round is over. It keeps its round
        number, so it still refuses that round's messages and older ones' (:meth:`handle`)."""
        self._request, self._vector, self._report, self._sessions = None, None, None, {}
        self._done.update({TRAIN, EVAL, *(f"session {s}" for s in SESSIONS)})

    @property
    def round(self) -> int:
        """The round this client last answered a message of (-1 before any): it refuses older ones."""
        return self._round

    def _at(self, round: int) -> None:
        if round < self._round:
            raise SecAggError(f"client {self.id}: a message of round {round} after round {self._round}")
        if round != self._round:  # a new round forgets the last one's secrets and vectors
            self._round, self._request, self._vector, self._report = round, None, None, None
            self._sessions, self._done = {}, set()

    def _once(self, what: str) -> None:
        if what in self._done:
            raise SecAggError(f"client {self.id}: a second {what!r} in round {self._round} (one per round)")
        self._done.add(what)

    def _request_of(self, round: int, seed: int) -> pl.Payload | None:
        if self._request is None:
            self._request = self.strategy.client_request(self.data, round, seed)
        return self._request

    def handle(self, kind: str, round: int, seed: int, message: bytes) -> bytes:
        """Answer one server message of ``round`` (bytes in, bytes out)."""
        self._at(round)
        msg = pl.decode(message)
        if kind == TRAIN:
            self._once(TRAIN)
            return self._train(msg, round, seed)
        if kind == EVAL:
            self._once(EVAL)
            return self._evaluate(msg)
        if kind == COUNT:  # DP-SGD's per-client epsilon needs the batch rate batch / examples
            if self.train.dp_sample_clip is None:
                raise ValueError(f"client {self.id}: its example count is asked for only under DP-SGD")
            return pl.encode({NUM_EXAMPLES: torch.tensor([len(self.data)], dtype=torch.int64)})
        session, _, stage = kind.partition("/")
        if session not in SESSIONS or stage not in STAGES:
            raise ValueError(f"unknown message kind {kind!r}")
        if stage == "advertise":
            self._once(f"session {session}")
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
        if stage == "unmask":
            return pl.encode(s.client.unmask(msg))
        return pl.encode(s.client.seeds(msg))  # the seeds and repair stages

    def _session_vector(self, session: str, round: int, seed: int, length: int) -> torch.Tensor:
        if session == "req":
            if not isinstance(self.form, RowsForm):
                raise ValueError("this strategy has no request union")
            vec = self.form.indicator(self._request_of(round, seed), length)["requested"]
        elif session == "upd":
            if self._vector is None:
                raise ValueError("the update session came before this client trained")
            vec = self._vector
        else:
            if self._report is None:
                raise ValueError("the evaluation session came before this client evaluated")
            vec = self._report
        if vec.numel() != length:
            raise ValueError(f"the session sums {length} values, this client's vector has {vec.numel()}")
        return vec

    def _train(self, msg: pl.Payload, round: int, seed: int) -> bytes:
        local = to_device(self._local_payload(msg, round, seed), self.device)
        upload = self.strategy.client_update(local, self.data.to(self.device), self.train, round, seed)
        return self._contribute(msg, to_device(upload, torch.device("cpu")), round, seed)

    def _local_payload(self, msg: pl.Payload, round: int, seed: int) -> pl.Payload:
        """What local training starts from (the round's control entry stays in ``msg`` for :meth:`_contribute`)."""
        request = self._request_of(round, seed) if isinstance(self.form, RowsForm) else None
        return self.form.local_payload({n: t for n, t in msg.items() if n != CTL}, request)

    def _contribute(self, msg: pl.Payload, upload: pl.Payload, round: int, seed: int) -> bytes:
        """The reply to a train message once local training gave ``upload``: this client's contribution,
        clipped to its bound and with its own noise share (its own generator), acknowledged or sent."""
        cap, clip_bound, noise_std, central = msg.pop(CTL).double().tolist()
        weight = None if cap < 0 else client_weight(len(self.data), cap)
        request = self._request_of(round, seed) if isinstance(self.form, RowsForm) else None
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

    def train_message(self, round: int, seed: int, message: bytes) -> tuple[pl.Payload, pl.Payload] | None:
        """A train message decoded and its local training's start (``(message, local payload)``), without
        answering it: for :func:`train_together`. ``None`` where this client would refuse it (a second
        train message this round, an older round, a message it cannot read): it then answers on its own
        (:meth:`handle`), which says why."""
        if round < self._round or (round == self._round and TRAIN in self._done):
            return None
        try:
            self._at(round)
            msg = pl.decode(message)
            if CTL not in msg:
                return None
            return msg, self._local_payload(msg, round, seed)
        except Exception:  # handle() reports it as this client's failure
            return None

    def _evaluate(self, msg: pl.Payload) -> bytes:
        if self.held_out is None:
            raise ValueError(f"client {self.id} holds no held-out data for federated evaluation")
        cap = float(msg.pop(EVAL_CTL)[0])
        ks = tuple(int(k) for k in msg.pop(EVAL_KS).tolist())
        report = ev.client_evaluation(self.strategy, pl.encode(msg), self.held_out(), ks)
        self._report = evaluation_vector(report, cap)
        return pl.encode({ACK: torch.ones(1, dtype=torch.uint8)})

    # ---- keeping the round's secrets between messages ----------------------------------------------
    def export(self) -> bytes:
        """What this client holds for the current round (its request, its contribution and evaluation
        vector in the clear, what the round already had, each session's parameters, secrets and
        vector) as bytes for :meth:`restore`. They are the client's secrets: keep them on the client
        (Flower: the node's ``context.state``)."""
        # small tensors are cloned: views of one received buffer must not share memory when saved
        out: pl.Payload = {"round": torch.tensor([self._round], dtype=torch.int64)}
        if self._request is not None:
            out.update({f"request/{n}": t.clone() for n, t in self._request.items()})
        if self._vector is not None:
            out["vector"] = self._vector
        if self._report is not None:
            out["report"] = self._report
        for what in self._done:
            out[f"done/{what}"] = torch.ones(1, dtype=torch.uint8)
        for name, s in self._sessions.items():
            out.update({f"{name}/advertise/{n}": t.clone() for n, t in s.advertise.items()})
            out.update({f"{name}/secagg/{n}": t for n, t in s.client.export().items()})
            out[f"{name}/session"] = torch.ones(1, dtype=torch.uint8)
            if name == "req":  # the other sessions sum the vector or the report themselves
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
        self._vector, self._report = got.get("vector"), got.get("report")
        self._done = set(part("done/"))
        self._sessions = {}
        for name in SESSIONS:
            if f"{name}/session" in got:
                advert = part(f"{name}/advertise/")
                params, bound = session_params(advert)
                sa = SecAggClient.restore(self.id, params, part(f"{name}/secagg/"))
                codec = RingCodec(params.bits, len(params.participants), bound)
                x = {"req": got.get(f"{name}/x"), "upd": self._vector, "evl": self._report}[name]
                if x is None:
                    raise ValueError(f"saved state of round {self._round} has a {name} session without its vector")
                self._sessions[name] = _Session(sa, codec, x, advert)


def train_together(
    clients: Sequence[PrivateClient], round: int, seeds: Mapping[int, int], messages: Mapping[int, bytes]
) -> dict[int, bytes] | None:
    """Train messages of one round answered with their local training in one batched pass
    (:func:`fedkernels.fl.batched.batched_client_updates`); ``None`` where the pass does not apply (the
    caller then calls each client's :meth:`PrivateClient.handle`).

    Only local training is batched: each client's contribution, clipping, weight and noise share stay its
    own (:meth:`PrivateClient._contribute`, with its own noise generator), as when it answers alone, so each
    reply equals its :meth:`~PrivateClient.handle` reply up to the pass's float rounding. The clients must
    be honest in-process clients of one strategy, training config and device, keyed by their ids; the
    pass trains on that device.
    """
    from ..batched import batched_client_updates

    by_id = {c.id: c for c in clients}
    if set(by_id) != set(messages) or len(by_id) < 2:
        return None
    first = clients[0]
    if any(c.strategy is not first.strategy or c.train != first.train or c.device != first.device for c in clients):
        return None
    started = {c: by_id[c].train_message(round, seeds[c], m) for c, m in messages.items()}
    if any(v is None for v in started.values()):
        return None
    msgs = {c: v[0] for c, v in started.items() if v is not None}
    local = {c: v[1] for c, v in started.items() if v is not None}
    data = {c: by_id[c].data for c in messages}
    uploads = batched_client_updates(first.strategy, data, first.train, local, round, dict(seeds), first.device)
    if uploads is None:
        return None
    host = torch.device("cpu")
    out = {}
    for c in messages:
        client = by_id[c]
        client._once(TRAIN)
        out[c] = client._contribute(msgs[c], to_device(uploads[c], host), round, seeds[c])
    return out
