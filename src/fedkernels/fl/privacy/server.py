"""The private federated loop: secure aggregation (SecAgg+) and/or client-level DP over any transport.

:class:`PrivateServer` is :class:`fedkernels.fl.Server` with private rounds. A round:

1. selects clients: Poisson sampling at rate ``q = clients_per_round / N`` with DP (the accountant's
   model), else the usual fixed-size sample;
2. (row strategies under secure aggregation without DP) runs a SecAgg+ session ``req`` summing each
   client's 0/1 vector of requested rows: the round's row set ``U`` is the union;
3. sends each client its download (the same for all clients of a row strategy) with the public
   weight cap (without DP: the client weighs itself by its own example count, which never leaves it),
   its clip and noise share; each trains and builds its contribution (:mod:`.forms`);
4. sums the contributions: a SecAgg+ session ``upd`` (the server sees only the sum, and checks the
   summed weights against their range: :mod:`.weights`), or in the clear for central DP (the server
   clips each one and adds the noise);
5. applies the sum (:meth:`DenseForm.finish`) and records epsilon.

Federated evaluation under secure aggregation (:meth:`PrivateServer.evaluate_federated`) sums the
clients' reports with a SecAgg+ session ``evl`` (:mod:`.evaluation`).

Messages go through a transport (``exchange(kind, round, {client: bytes}, reply_limit) -> {client:
answer}``): in-process here, Flower messages in :mod:`fedkernels.integrations.flower.private_server`.
:func:`private_round` needs only what :class:`PrivateRun` lists, so both drive the same round.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from ...data.client_store import ClientStore
from .. import evaluation as ev
from .. import payload as pl
from ..client import call_with_deadline
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
from .client import CTL, TRAIN, PrivateClient, train_together
from .evaluation import ACK_SPEC, private_evaluation
from .forms import DenseForm, RowsForm, form_of
from .population import PrivateClients
from .ring import RingCodec
from .secagg_params import graph_params
from .session import Exchange, Tally, secure_sum
from .weights import check_weight_sums

PrivateWrapper = Callable[[int, PrivateClient], object]


@dataclass(frozen=True)
class PrivacyConfig:
    """What a private run protects and how.

    Args:
        secagg: sum the clients' contributions with SecAgg+ (the server sees only sums).
        corrupt_fraction: the threat model's share of a session's clients that may collude with the
            server (docs/api/privacy.md, Threat model); with ``dropout_fraction`` it sets the SecAgg+
            graph (:func:`~fedkernels.fl.privacy.secagg_params.graph_params`). In [0, 1).
        dropout_fraction: the share of a session's clients that may drop out with the sum still
            recovered (except with probability 2^-20). In [0, 1).
        max_dropouts: an explicit ``k - threshold`` (None: the smallest safe threshold), checked
            against the threat model for the round's clients.
        bits: the ring Z_{2^bits} of the masked sums (32: 4 bytes a value, like float32).
        bound: without DP, every contributed coordinate is clamped to ``[-bound, bound]`` before
            encoding (the ring holds the sum of the round's clients at that bound; the step is
            ``2^-f`` with f from :func:`~fedkernels.fl.privacy.ring.fraction_bits`). With DP the bound
            is the clip plus 8 standard deviations of a client's noise share.
        degree: an explicit SecAgg+ neighbour count k (None: the smallest safe one), checked.
        weight_cap: weighted rounds (no client-level DP): a client weighs its contribution by
            ``min(examples, weight_cap) / weight_cap``, computed on the client and summed masked, so
            the server never learns a client's count (a public number; clients with more examples
            than the cap weigh as much as the cap; the fixed-point error of a mean grows with it).
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
    corrupt_fraction: float = 0.1
    dropout_fraction: float = 0.1
    weight_cap: float = 4096.0

    def __post_init__(self) -> None:
        """The checks :func:`~fedkernels.fl.privacy_settings.privacy_settings` runs, by field name."""
        if not isinstance(self.secagg, bool):
            raise ValueError(f"secagg must be true or false, got {self.secagg!r}")
        check_int("l1diff_segments", self.l1diff_segments, low=0)
        check_real("bound", self.bound, low=1.0, high=1e9)  # >= 1: weights are encoded too
        check_int("bits", self.bits, low=8, high=62)
        for name in ("max_dropouts", "degree"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low=0)
        for name in ("corrupt_fraction", "dropout_fraction"):
            check_real(name, getattr(self, name), low=0.0, high=1.0, open_high=True)
        check_real("weight_cap", self.weight_cap, low=1.0, high=2.0**40)
        if self.dp is not None and not isinstance(self.dp, dp.DPConfig):
            raise ValueError(f"dp must be a DPConfig or None, got {self.dp!r}")

    def graph_for(self, n: int) -> tuple[int, int]:
        """``(k, threshold)`` of a SecAgg+ session of ``n`` participants under the threat model.

        Raises:
            ValueError: no graph (or not the explicit ``degree``/``max_dropouts``) is secure against
                ``corrupt_fraction`` and correct with ``dropout_fraction`` for ``n`` clients.
        """
        g = graph_params(n, self.corrupt_fraction, self.dropout_fraction, self.degree, self.max_dropouts)
        return g.k, g.threshold

    def colluders_for(self, n: int) -> int:
        """T: the clients of a session of ``n`` that may collude with the server."""
        return math.floor(self.corrupt_fraction * n)

    def dropouts_for(self, n: int) -> int:
        """The dropouts a session of ``n`` participants plans for: ``max_dropouts`` when set, else
        ``ceil(dropout_fraction * n)`` (more may drop and the sum still be recovered)."""
        if self.max_dropouts is not None:
            return self.max_dropouts
        return math.ceil(self.dropout_fraction * n - 1e-12)


def check_private(strategy: Strategy, privacy: PrivacyConfig, clients_per_round: int | None = None) -> DenseForm:
    """The strategy's round as sums (:func:`~.forms.form_of`), after checking ``privacy`` fits it.

    Args:
        clients_per_round: with secure aggregation, the SecAgg+ graph and the ring are checked for a
            session of this many clients (a round that draws another number is checked again then).

    Raises:
        ValueError: nothing to protect, a strategy that cannot be summed (the reason), DP for a strategy
            whose releases DP does not cover, a form that refuses DP (L1Diff's ``gamma_rel``), or secure
            aggregation that cannot be both secure and correct for ``clients_per_round`` clients under the
            threat model (or whose ring cannot hold their sum).
    """
    if not privacy.secagg and privacy.dp is None:
        raise ValueError("privacy protects nothing: set secagg or dp (or use Server)")
    if privacy.secagg and clients_per_round is not None:
        try:
            privacy.graph_for(clients_per_round)
            if privacy.dp is None:
                RingCodec(privacy.bits, clients_per_round, privacy.bound).frac  # noqa: B018 (raises if too small)
        except ValueError as e:
            raise ValueError(f"secagg with {clients_per_round} clients a round: {e}") from None
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


def _same(data: ClientData) -> ClientData:
    return data


class PrivateServer(Server):
    """:class:`fedkernels.fl.Server` whose rounds are private (see the module docstring).

    Args:
        strategy, clients, num_features, num_classes, config: as for Server.
        privacy: what to protect (at least one of ``secagg`` and ``dp``).
        client_wrapper: ``(client_id, PrivateClient) -> endpoint`` answering ``handle(kind, round,
            seed, message)``, e.g. a test's client that drops out at a chosen stage.

    ``history[r].privacy`` holds the round's ``epsilon`` (at ``delta``, accountant over the rounds so
    far), ``noise_multiplier``, ``survivors`` and, for row strategies, ``round_rows`` (``|U|``), plus the
    SecAgg+ bytes; ``history[r].failed`` the clients whose contribution is not in the round's sums
    (and why), ``history[r].faults`` those whose contribution is in them although a later SecAgg+
    message of theirs was refused.
    """

    def __init__(
        self,
        strategy: Strategy,
        clients: Sequence[ClientData],
        num_features: int,
        num_classes: int,
        config: RunConfig,
        privacy: PrivacyConfig,
        client_wrapper: PrivateWrapper | None = None,
    ) -> None:
        self.form: DenseForm = check_private(strategy, privacy, min(config.clients_per_round, len(clients)))
        self.privacy = privacy
        super().__init__(strategy, clients, num_features, num_classes, config)
        self.state = {**privacy_entries(privacy), **self.form.with_initial_entries(self.state)}
        self.q = config.clients_per_round / len(clients)
        self.sigma = calibrated_sigma(privacy, config, len(clients))
        self.unrunnable = unrunnable_chance(privacy, config, len(clients))
        # made when a round first asks for one; a client of a ClientStore reads its data when it needs it
        store = isinstance(clients, ClientStore)

        def make(c: int) -> PrivateClient:
            data = functools.partial(clients.__getitem__, c) if store else clients[c]
            return PrivateClient(c, strategy, self.form, data, config.train, privacy.noise_seed, device=self.device)

        self.private_clients = PrivateClients(make, len(clients), client_wrapper)
        self.noise_generator = dp.noise_generator(privacy.noise_seed)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def load_checkpoint(self, path: str | Path) -> None:
        """:meth:`Server.load_checkpoint`, with the form's server-side entries expected too."""
        self.state = {**privacy_entries(self.privacy), **self.form.with_initial_entries(self.state)}
        super().load_checkpoint(path)

    def evaluate_federated(
        self,
        held_out: list[ClientData],
        ks: tuple[int, ...] | None = None,
        inv_propensity: torch.Tensor | None = None,
        round: int | None = None,
    ) -> tuple[dict[str, float], dict[int, str]]:
        """:meth:`Server.evaluate_federated`; under secure aggregation the reports are summed by a
        SecAgg+ session (:mod:`.evaluation`): the server learns the weighted means, not one client's
        report or held-out count (a sum it cannot have, e.g. fewer than 2 clients, gives no metrics)."""
        if not self.privacy.secagg:
            return super().evaluate_federated(held_out, ks, inv_propensity, round)
        if len(held_out) != len(self.clients):
            raise ValueError(f"held_out must hold one set per client ({len(self.clients)}), got {len(held_out)}")
        for client, data in zip(self.private_clients, held_out, strict=True):  # in process: its own held-out set
            client.held_out = functools.partial(_same, data)
        return evaluate_privately(self, self.exchange_private, held_out[0].num_classes, ks, inv_propensity, round)

    # ---- transport ---------------------------------------------------------------------------------
    def exchange_private(
        self, kind: str, round: int, messages: Mapping[int, bytes], reply_limit: int = pl.DEFAULT_MAX_BYTES
    ) -> dict[int, Answer]:
        """In-process transport: each client's ``handle`` under the deadline (its failure as the answer).
        ``reply_limit`` is not needed here: the round decodes every reply against its spec.

        With ``config.batch_clients`` a train message to honest clients trains them in one batched pass
        (:meth:`_train_batched`)."""
        if kind == TRAIN:
            fast = self._train_batched(round, messages)
            if fast is not None:
                return dict(fast)
        out: dict[int, Answer] = {}
        for c, msg in messages.items():
            seed = derive_seed(self.config.seed, "client", round, c)
            ep = self.private_clients.endpoint(c)
            try:
                out[c] = call_with_deadline(
                    functools.partial(ep.handle, kind, round, seed, msg), self.config.client_timeout
                )
            except Exception as e:  # this client's failure only
                out[c] = e
        return out

    def _train_batched(self, round: int, messages: Mapping[int, bytes]) -> dict[int, bytes] | None:
        """The train replies of :func:`~.client.train_together` (local training in one batched pass; each
        client's clip, weight and noise share its own), or ``None`` where the round's clients answer one
        by one: batching off, a deadline, fewer than 2 clients, a wrapped endpoint, DP-SGD on the host
        (where the sequential DP-SGD costs less, as in :class:`~fedkernels.fl.server.InProcessTransport`),
        or a strategy without a batched form. The clients train on the run's device."""
        cfg = self.config
        if not cfg.batch_clients or cfg.client_timeout is not None or len(messages) < 2:
            return None
        if cfg.train.dp_sample_clip is not None and self.device.type == "cpu":
            return None
        ends = [self.private_clients.endpoint(c) for c in messages]
        if any(type(e) is not PrivateClient for e in ends):  # a wrapper (a test's dropout) answers itself
            return None
        seeds = {c: derive_seed(cfg.seed, "client", round, c) for c in messages}
        return train_together(ends, round, seeds, messages)

    # ---- one round ---------------------------------------------------------------------------------
    def run_round(self) -> RoundRecord:
        self.private_clients.end_round()  # the last round's clients drop its secrets: never read again
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
    tally = Tally()
    live = list(chosen)
    info: dict[str, float] = {}
    skipped = ""
    weighted = dpc is None
    # each client weighs itself by min(examples, cap) / cap (its count never leaves it); cap 1: uniform
    cap = (1.0 if cfg.client_weighting == "uniform" else priv.weight_cap) if weighted else -1.0

    rows: torch.Tensor | None = None
    if isinstance(form, RowsForm):
        p = form.num_rows(state)
        if dpc is not None or form.requestless() or not priv.secagg:
            rows = torch.arange(p, dtype=torch.int64)
        elif len(live) >= 2:
            union, live, why = _session(server, exchange, "req", live, {"requested": (p,)}, 1.0, tally)
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
                cap,
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
                codec = RingCodec(priv.bits, len(live), bound)  # the session's
                sums, live, why = _session(server, exchange, "upd", live, layout, bound, tally)
                tally.contributed.update(live)  # their masked updates are in the sum
                skipped = why if sums is None else ""
                if sums is not None and weighted:  # the weights inside the sum, checked against their range
                    error = codec.error_bound(len(live))
                    skipped = check_weight_sums(sums, len(live), cap, error)
                    sums = None if skipped else sums
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
        faults=sorted(tally.faults.items()),
        contributed=sorted(tally.contributed),
    )
    rec.privacy = info
    rec.seconds = time.perf_counter() - t0
    return rec


def _session(
    server: PrivateRun,
    exchange: Exchange,
    name: str,
    live: list[int],
    layout: dict[str, tuple[int, ...]],
    bound: float,
    tally: Tally,
) -> tuple[dict[str, torch.Tensor] | None, list[int], str]:
    """:func:`~.session.secure_sum` of the round's session ``name`` over ``live``."""
    priv, cfg = server.privacy, server.config
    return secure_sum(priv.graph_for, exchange, name, cfg.seed, server.round, live, layout, priv.bits, bound, tally)


def evaluate_privately(
    server: PrivateRun,
    exchange: Exchange,
    num_classes: int,
    ks: tuple[int, ...] | None,
    inv_propensity: torch.Tensor | None,
    round: int | None,
) -> tuple[dict[str, float], dict[int, str]]:
    """Federated evaluation of the global model summed by SecAgg+ (:mod:`.evaluation`): the clients
    :func:`fedkernels.fl.evaluation.evaluation_clients` picks after ``round``; the metrics and the
    clients left out (a sum that cannot be had leaves every client out, with the reason)."""
    cfg, priv = server.config, server.privacy
    ks = ev.evaluation_ks(ks or cfg.eval_k, num_classes)
    per_round = cfg.eval_clients if round is not None else None
    clients = ev.evaluation_clients(cfg.seed, round or 0, server.num_clients, per_round)
    download = ev.evaluation_payload(server.state, inv_propensity)
    cap = 1.0 if cfg.client_weighting == "uniform" else priv.weight_cap
    metrics, failed, why = private_evaluation(
        download,
        clients,
        ks,
        inv_propensity is not None,
        exchange,
        priv.graph_for,
        cfg.seed,
        round or 0,
        priv.bits,
        cap,
    )
    if why:
        failed = {**dict.fromkeys(clients, f"federated evaluation under secure aggregation: {why}"), **failed}
    return metrics, failed
