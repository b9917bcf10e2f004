"""The private federated loop: secure aggregation (SecAgg+) and/or client-level DP over any transport.

:class:`PrivateServer` is :class:`fedkernels.fl.Server` with private rounds. A round:

1. selects clients: Poisson sampling at rate ``q = clients_per_round / N`` with DP (the accountant's
   model), else the usual fixed-size sample;
2. (row strategies under secure aggregation without DP) runs a SecAgg+ session ``req`` summing each
   client's 0/1 vector of requested rows: the round's row set ``U`` is the union;
3. sends each client its download (the same for all clients of a row strategy) with its weight, clip
   and noise share; each trains and builds its contribution (:mod:`.forms`);
4. sums the contributions: a SecAgg+ session ``upd`` (the server sees only the sum), or in the clear
   for central DP (the server clips each one and adds the noise);
5. applies the sum (:meth:`DenseForm.finish`) and records epsilon.

Messages go through a transport (``exchange(kind, round, {client: bytes}, reply_limit) -> {client:
answer}``): in-process here, Flower messages in :mod:`fedkernels.integrations.flower.private_server`.
:func:`private_round` needs only what :class:`PrivateRun` lists, so both drive the same round.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from .. import payload as pl
from ..client import call_with_deadline
from ..evaluation import MAX_EXAMPLES
from ..privacy_settings import check_int, check_real, check_strategy_dp
from ..round import Answer, failure_reason
from ..seeding import derive_seed
from ..server import RunConfig, Server
from ..strategy import State, Strategy
from ..types import ClientData, RoundRecord
from . import accounting as acct
from . import dp, ftrl
from . import mechanism as mech
from .accounting import RunAccountant, make_accountant
from .client import ACK, CTL, NUM_EXAMPLES, TRAIN, PrivateClient, session_header, unflatten
from .forms import DenseForm, RowsForm, form_of
from .ring import RingCodec
from .secagg import SecAggError, SecAggParams, SecAggServer, default_degree

# (kind, round, {client: message}, the most bytes a well-formed reply has) -> {client: reply or failure}
Exchange = Callable[[str, int, Mapping[int, bytes], int], dict[int, Answer]]
PrivateWrapper = Callable[[int, PrivateClient], object]
ACK_SPEC = pl.PayloadSpec({ACK: pl.TensorSpec(torch.uint8, (1,))})
COUNT_SPEC = pl.PayloadSpec({NUM_EXAMPLES: pl.TensorSpec(torch.int64, (1,), min_value=0, max_value=MAX_EXAMPLES)})


@dataclass(frozen=True)
class PrivacyConfig:
    """What a private run protects and how.

    Args:
        secagg: sum the clients' contributions with SecAgg+ (the server sees only sums).
        max_dropouts: t, the dropouts a SecAgg+ session always survives (None: the most the
            neighbour graph allows, ``k - floor(k/2) - 1`` for k neighbours).
        bits: the ring Z_{2^bits} of the masked sums (32: 4 bytes a value, like float32).
        bound: without DP, every contributed coordinate is clamped to ``[-bound, bound]`` before
            encoding (the ring holds the sum of the round's clients at that bound; the step is
            ``2^-f`` with f from :func:`~fedkernels.fl.privacy.ring.fraction_bits`). With DP the bound
            is the clip plus 8 standard deviations of a client's noise share.
        degree: SecAgg+ neighbours per client (None: :func:`~fedkernels.fl.privacy.secagg.default_degree`).
        dp: client-level DP (None: none).
        noise_seed: None (DP noise and, with DP, each round's client sample from OS randomness: the
            private choice) or a seed for a reproducible simulation (anyone who knows it can subtract
            the noise and knows the sample; the round records say ``seeded``).
        l1diff_segments: the l1-difference strategies' public-segmentation period K (0: every round
            dense; K >= 2: every K-th round dense, the K - 1 between one value per public segment;
            :class:`~fedkernels.fl.privacy.forms.L1DiffForm`). Other strategies ignore it.
        corrupt_fraction: the share of a round's clients that may collude with the server (distributed
            DP: their noise shares are subtracted, so the others' shares carry the calibrated noise).
    """

    secagg: bool = False
    max_dropouts: int | None = None
    bits: int = 32
    bound: float = 4.0
    degree: int | None = None
    dp: dp.DPConfig | None = None
    noise_seed: int | None = None
    l1diff_segments: int = 0
    corrupt_fraction: float = 0.0

    def __post_init__(self) -> None:
        """The checks :func:`~fedkernels.fl.privacy.settings.privacy_settings` runs, by field name."""
        if not isinstance(self.secagg, bool):
            raise ValueError(f"secagg must be true or false, got {self.secagg!r}")
        check_int("l1diff_segments", self.l1diff_segments, low=0)
        check_real("bound", self.bound, low=1.0, high=1e9)  # >= 1: weights are encoded too
        check_int("bits", self.bits, low=8, high=62)
        check_real("corrupt_fraction", self.corrupt_fraction, low=0.0, high=1.0, open_high=True)
        for name in ("max_dropouts", "degree"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low=0)
        if self.dp is not None and not isinstance(self.dp, dp.DPConfig):
            raise ValueError(f"dp must be a DPConfig or None, got {self.dp!r}")

    def colluders_for(self, n: int) -> int:
        """T: the clients of a session of ``n`` that may collude with the server."""
        return math.floor(self.corrupt_fraction * n)

    def dropouts_for(self, n: int) -> int:
        """t for a session of ``n`` participants."""
        k = default_degree(n) if self.degree is None else min(self.degree, n - 1)
        return k - k // 2 - 1 if self.max_dropouts is None else self.max_dropouts


def check_private(strategy: Strategy, privacy: PrivacyConfig) -> DenseForm:
    """The strategy's round as sums (:func:`~.forms.form_of`), after checking ``privacy`` fits it.

    Raises:
        ValueError: nothing to protect, a strategy that cannot be summed (the reason), DP for a strategy
            whose releases DP does not cover, or a form that refuses DP (L1Diff's ``gamma_rel``).
    """
    if not privacy.secagg and privacy.dp is None:
        raise ValueError("privacy protects nothing: set secagg or dp (or use Server)")
    check_strategy_dp(strategy, privacy.dp is not None, False)
    form = form_of(strategy, privacy.l1diff_segments if strategy.private_segments else 0)
    if privacy.dp is not None:
        form.check_dp()
    return form


def unrunnable_chance(privacy: PrivacyConfig, config: RunConfig, num_clients: int) -> float:
    """Distributed DP-FedAvg: the chance a round's Poisson sample is too small to carry the noise (under
    2 clients, or no honest share left after t dropouts and the colluders), so that it is not released
    (:func:`~.mechanism.unrunnable_probability`); 0 for any other mechanism.

    Raises:
        ValueError: the run's rounds would spend half of delta or more on it (before any data is read).
    """
    dpc = privacy.dp
    if dpc is None or not privacy.secagg or dpc.mechanism != "poisson":
        return 0.0

    def unrunnable(m: int) -> bool:
        return m < 2 or mech.honest_floor(m, privacy.dropouts_for(m), privacy.colluders_for(m)) < 1

    p = mech.unrunnable_probability(num_clients, config.clients_per_round / num_clients, unrunnable)
    if config.rounds * p >= dpc.delta / 2:
        raise ValueError(
            f"distributed DP: at {config.clients_per_round} of {num_clients} clients a round, a round's Poisson "
            f"sample is too small to carry the noise with probability {p:.3g}; over {config.rounds} rounds that "
            f"spends half of delta = {dpc.delta:g} or more. Sample more clients a round, or use central DP"
        )
    return p


def calibrated_sigma(privacy: PrivacyConfig, config: RunConfig, num_clients: int) -> float | None:
    """The run's noise multiplier (None without client-level DP): the given one, or the one that keeps
    ``config.rounds`` rounds within the target epsilon."""
    if privacy.dp is None:
        return None
    per_tree = ftrl.rounds_per_tree(num_clients, config.clients_per_round)
    return privacy.dp.noise_multiplier(config.clients_per_round / num_clients, config.rounds, per_tree)


def privacy_entries(privacy: PrivacyConfig) -> dict[str, torch.Tensor]:
    """Server-side state entries the privacy mechanism keeps (DP-FTRL: its trees' secret seed)."""
    if privacy.dp is not None and privacy.dp.mechanism == "tree":
        return ftrl.initial_entries(privacy.noise_seed)
    return {}


class PrivateRun(Protocol):
    """What :func:`private_round` reads and updates: the in-process :class:`PrivateServer` and the
    Flower :class:`~fedkernels.integrations.flower.private_server.PrivateFlowerStrategy` are both one."""

    config: RunConfig
    privacy: PrivacyConfig
    form: DenseForm
    state: State
    q: float  # the sampling rate clients_per_round / num_clients
    sigma: float | None  # the noise multiplier (None: no client-level DP)
    unrunnable: float  # distributed DP: the chance a round's sample is too small to run (unrunnable_chance)
    noise_generator: torch.Generator  # the server's DP noise (central DP)

    @property
    def round(self) -> int: ...

    @property
    def num_clients(self) -> int: ...

    def example_counts(self, clients: list[int]) -> dict[int, int | BaseException]:
        """Each client's example count (its weight's numerator), or why it cannot be had."""
        ...


@dataclass
class _Tally:
    down: int = 0
    up: int = 0
    secagg_down: int = 0
    secagg_up: int = 0
    failed: dict[int, str] = field(default_factory=dict)
    contributed: set[int] = field(default_factory=set)  # clients whose update reached the server


class PrivateServer(Server):
    """:class:`fedkernels.fl.Server` whose rounds are private (see the module docstring).

    Args:
        strategy, clients, num_features, num_classes, config: as for Server.
        privacy: what to protect (at least one of ``secagg`` and ``dp``).
        client_wrapper: ``(client_id, PrivateClient) -> endpoint`` answering ``handle(kind, round,
            seed, message)``, e.g. a test's client that drops out at a chosen stage.

    ``history[r].privacy`` holds the round's ``epsilon`` (at ``delta``, accountant over the rounds so
    far), ``noise_multiplier``, ``survivors`` and, for row strategies, ``round_rows`` (``|U|``), plus the
    SecAgg+ bytes.
    """

    def __init__(
        self,
        strategy: Strategy,
        clients: list[ClientData],
        num_features: int,
        num_classes: int,
        config: RunConfig,
        privacy: PrivacyConfig,
        client_wrapper: PrivateWrapper | None = None,
    ) -> None:
        self.form: DenseForm = check_private(strategy, privacy)
        self.privacy = privacy
        super().__init__(strategy, clients, num_features, num_classes, config)
        self.state = {**privacy_entries(privacy), **self.form.with_initial_entries(self.state)}
        self.q = config.clients_per_round / len(clients)
        self.sigma = calibrated_sigma(privacy, config, len(clients))
        self.unrunnable = unrunnable_chance(privacy, config, len(clients))
        self.private_endpoints: list[Any] = []  # PrivateClient or a wrapper with its handle()
        for c, data in enumerate(clients):
            ep: object = PrivateClient(c, strategy, self.form, data, config.train, privacy.noise_seed)
            self.private_endpoints.append(client_wrapper(c, ep) if client_wrapper is not None else ep)  # type: ignore[arg-type]
        self.noise_generator = dp.noise_generator(privacy.noise_seed)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def load_checkpoint(self, path: str | Path) -> None:
        """:meth:`Server.load_checkpoint`, with the form's server-side entries expected too."""
        self.state = {**privacy_entries(self.privacy), **self.form.with_initial_entries(self.state)}
        super().load_checkpoint(path)

    def example_counts(self, clients: list[int]) -> dict[int, int | BaseException]:
        """The clients' example counts (the server holds the clients here)."""
        return {c: len(self.clients[c]) for c in clients}

    # ---- transport ---------------------------------------------------------------------------------
    def exchange_private(
        self, kind: str, round: int, messages: Mapping[int, bytes], reply_limit: int = pl.DEFAULT_MAX_BYTES
    ) -> dict[int, Answer]:
        """In-process transport: each client's ``handle`` under the deadline (its failure as the answer).
        ``reply_limit`` is not needed here: the round decodes every reply against its spec."""
        out: dict[int, Answer] = {}
        for c, msg in messages.items():
            seed = derive_seed(self.config.seed, "client", round, c)
            ep = self.private_endpoints[c]
            try:
                out[c] = call_with_deadline(
                    functools.partial(ep.handle, kind, round, seed, msg), self.config.client_timeout
                )
            except Exception as e:  # this client's failure only
                out[c] = e
        return out

    # ---- one round ---------------------------------------------------------------------------------
    def run_round(self) -> RoundRecord:
        rec = private_round(self, self.exchange_private)
        self.record(rec)
        return rec

    def new_accountant(self) -> RunAccountant | None:
        """Client-level (the privacy config's DP) and sample-level (DP-SGD) accounting."""
        return make_accountant(
            self.config.train, self.privacy, self.config.sample_delta, lambda c: len(self.clients[c])
        )


def private_round(server: PrivateRun, exchange: Exchange) -> RoundRecord:
    """One private round of ``server`` over ``exchange``; updates ``server.state``, returns the record."""
    t0 = time.perf_counter()
    cfg, priv, form, state = server.config, server.privacy, server.form, server.state
    r, n_all = server.round, server.num_clients
    dpc = priv.dp
    seeded = priv.noise_seed is not None
    tree = dpc is not None and dpc.mechanism == "tree"
    if tree:  # DP-FTRL: public participation, each client once a tree
        tree_index, tree_pos, chosen = ftrl.tree_round(cfg.seed, r, n_all, cfg.clients_per_round)
    else:
        chosen = mech.round_clients(dpc is not None, seeded, cfg.seed, r, n_all, cfg.clients_per_round)
    tally = _Tally()
    live = list(chosen)
    info: dict[str, float] = {}
    skipped = ""
    weighted = dpc is None
    weights: dict[int, float] = {}
    if weighted and live:  # a_k = examples / the round's largest (at most 1: the ring's bound holds it)
        counts = server.example_counts(live)
        got: dict[int, int] = {}
        for c in live:
            n = counts.get(c, TimeoutError("timed out (no reply)"))
            if isinstance(n, BaseException):
                tally.failed[c] = failure_reason(n)
            else:
                got[c] = n
        live = [c for c in live if c in got]
        top = max(got.values(), default=0) or 1
        weights = {c: got[c] / top for c in live}

    rows: torch.Tensor | None = None
    if isinstance(form, RowsForm):
        p = form.num_rows(state)
        if dpc is not None or form.requestless() or not priv.secagg:
            rows = torch.arange(p, dtype=torch.int64)
        elif len(live) >= 2:
            union, live, why = _secure_sum(server, exchange, "req", r, live, {"requested": (p,)}, 1.0, tally)
            if union is None:
                skipped = why
                rows = torch.zeros(0, dtype=torch.int64)
            else:
                rows = (union["requested"] > 0.5).nonzero().reshape(-1)
        info["round_rows"] = float(rows.numel()) if rows is not None else 0.0

    # train: every live client gets its download, weight, clip and noise share
    layout = dict(sorted(form.layout(state, weighted, rows).items())) if not skipped else {}
    contributions: dict[int, dict[str, torch.Tensor]] = {}
    secure = priv.secagg
    client_std = 0.0
    honest = colluders = shared = 0
    if not skipped and live and dpc is not None and secure and server.sigma and not tree:
        shared = len(live)
        t = priv.dropouts_for(len(live)) if len(live) >= 2 else 0
        colluders = priv.colluders_for(len(live))
        honest = mech.honest_floor(len(live), t, colluders)
        if honest < 1:
            skipped = (
                f"distributed DP: {len(live)} clients with {t} dropouts and {colluders} colluders allowed leave no "
                "honest client to carry the noise (the round is not run)"
            )
        else:
            client_std = mech.share_std(server.sigma, dpc.clip, honest)
    if not skipped and live:
        msgs = {}
        for c in live:
            seed = derive_seed(cfg.seed, "client", r, c)
            down = form.download(state, c, r, seed, rows)
            ctl = [
                weights.get(c, -1.0),
                dpc.clip if (dpc is not None and secure) else 0.0,
                client_std,
                0.0 if secure else 1.0,
            ]
            msgs[c] = pl.encode({**down, CTL: torch.tensor(ctl, dtype=torch.float64)})
        spec = pl.PayloadSpec({n: pl.TensorSpec(torch.float32, s) for n, s in layout.items()})
        answers = exchange(TRAIN, r, msgs, (ACK_SPEC if secure else spec).byte_limit())
        for c in live:
            tally.down += len(msgs[c])
            ans = answers.get(c, TimeoutError("timed out (no reply)"))
            if isinstance(ans, BaseException) or not ans:
                tally.failed[c] = failure_reason(ans if isinstance(ans, BaseException) else ValueError("sent nothing"))
                continue
            tally.up += len(ans)
            if not secure:
                tally.contributed.add(c)  # its clipped update reached the server in the clear
                try:
                    contributions[c] = {n: v.double() for n, v in pl.decode(ans, spec).items()}
                except ValueError as e:
                    tally.failed[c] = failure_reason(e)
        live = [c for c in live if c not in tally.failed]

    sums: dict[str, torch.Tensor] | None = None
    if not skipped and (live or (dpc is not None and not secure)):
        if secure:
            bound = priv.bound
            if dpc is not None:
                bound = max(1.0, dpc.clip + 8.0 * (client_std if live else 0.0))
            if len(live) < 2:
                skipped = "secure aggregation needs at least 2 clients in the round"
            else:
                sums, live, why = _secure_sum(server, exchange, "upd", r, live, layout, bound, tally)
                tally.contributed.update(live)  # their masked updates reached the server
                skipped = why if sums is None else ""
                if sums is not None and honest and len(live) < honest + colluders:
                    # more than t dropped: the honest survivors' shares fall short of the calibrated noise
                    sums = None
                    skipped = (
                        f"distributed DP: {shared - len(live)} of {shared} clients dropped, more than the noise "
                        "shares were calibrated for; the sum is not released (it would carry less than the "
                        "calibrated noise)"
                    )
        else:
            clip_bound = dpc.clip if dpc is not None else None
            sums = {n: torch.zeros(s, dtype=torch.float64) for n, s in layout.items()}
            for c in live:
                x = contributions[c] if clip_bound is None else dp.clip(contributions[c], clip_bound)
                for name in sums:
                    sums[name] += x[name]
            if dpc is not None and server.sigma and not tree:  # central DP: the server adds the noise
                for name, z in dp.gaussian_like(sums, server.sigma * dpc.clip, server.noise_generator).items():
                    sums[name] += z  # (a round of nobody too)
    if sums is not None and tree and dpc is not None and server.sigma:  # DP-FTRL: the server adds the tree's noise
        shapes = {n: tuple(t.shape) for n, t in sums.items()}
        seed = int(state[ftrl.TREE_SEED])
        for name, z in ftrl.round_noise(seed, tree_index, tree_pos, shapes, server.sigma * dpc.clip).items():
            sums[name] += z

    if sums is not None:
        den = server.q * n_all if dpc is not None else None
        if isinstance(form, RowsForm):
            server.state = form.finish(state, sums, den, rows=rows)
        else:
            server.state = form.finish(state, sums, den)
    if tree and server.sigma is not None:
        info.update(mech.tree_record(tree_index, server.sigma, seeded), delta=dpc.delta)  # type: ignore[union-attr]
    elif dpc is not None and server.sigma is not None:
        info.update(mech.poisson_record(server.q, server.sigma, seeded, server.unrunnable), delta=dpc.delta)
        if sums is not None and secure:
            info.update(mech.distributed_record(server.sigma, honest, len(live), colluders) if honest else {})
        elif sums is not None:  # central: the server added the noise and saw every update
            info.update({acct.SIGMA_RELEASE: server.sigma, acct.SIGMA_SERVER: 0.0})
    info.update(
        survivors=float(len(live) if sums is not None else 0),
        secagg_bytes_up=float(tally.secagg_up),
        secagg_bytes_down=float(tally.secagg_down),
    )
    rec = RoundRecord(
        r,
        list(chosen),
        sorted(tally.failed.items()),
        tally.down + tally.secagg_down,
        tally.up + tally.secagg_up,
        skipped=skipped,
        contributed=sorted(tally.contributed),
    )
    rec.privacy = info
    rec.seconds = time.perf_counter() - t0
    return rec


def _secure_sum(
    server: PrivateRun,
    exchange: Exchange,
    name: str,
    round: int,
    live: list[int],
    layout: dict[str, tuple[int, ...]],
    bound: float,
    tally: _Tally,
) -> tuple[dict[str, torch.Tensor] | None, list[int], str]:
    """One SecAgg+ session over ``live`` summing vectors of ``layout``. Returns the decoded sums (or None
    and why), the clients whose vectors are in them, and records dropouts in ``tally``."""
    priv, cfg = server.privacy, server.config
    length = sum(math.prod(s) for s in layout.values())
    try:
        params = SecAggParams(
            tuple(live),
            length,
            priv.bits,
            priv.dropouts_for(len(live)),
            derive_seed(cfg.seed, "secagg-graph", round, name),
            f"{cfg.seed}/{round}/{name}".encode(),
            priv.degree,
        )
        codec = RingCodec(priv.bits, len(live), bound)
        codec.frac  # noqa: B018  (raises if the ring cannot hold this many clients at this bound)
    except ValueError as e:
        return None, live, f"secure aggregation ({name}) cannot run: {e}"
    sa = SecAggServer(params)
    header = session_header(params, bound)
    raw = pl.encode(header)
    steps: list[tuple[str, Callable[[], dict[int, pl.Payload]], Callable[[int, pl.Payload], None]]] = [
        ("advertise", lambda: {c: header for c in live}, sa.take_advertise),
        ("share", sa.share_messages, sa.take_shares),
        ("masked", sa.masked_messages, sa.take_masked),
        ("unmask", sa.unmask_messages, sa.take_unmask),
    ]
    for stage, messages, take in steps:
        msgs = {c: (raw if stage == "advertise" else pl.encode(m)) for c, m in messages().items()}
        limit = sa.spec(stage, live[0]).byte_limit()  # the same for every client of the session
        answers = exchange(f"{name}/{stage}", round, msgs, limit)
        for c, m in msgs.items():
            tally.secagg_down += len(m)
            ans = answers.get(c, TimeoutError("timed out (no reply)"))
            if isinstance(ans, BaseException) or not ans:
                err = ans if isinstance(ans, BaseException) else ValueError("sent nothing")
                tally.failed.setdefault(c, f"dropped in secure aggregation ({name}, {stage}): {failure_reason(err)}")
                continue
            tally.secagg_up += len(ans)
            try:
                take(c, pl.decode(ans, sa.spec(stage, c)))
            except ValueError as e:
                tally.failed.setdefault(c, f"dropped in secure aggregation ({name}, {stage}): {failure_reason(e)}")
    try:
        total = sa.result()
    except SecAggError as e:
        return None, sa.survivors, f"secure aggregation ({name}) failed: {e}"
    return unflatten(codec.decode(total), layout), sa.survivors, ""
