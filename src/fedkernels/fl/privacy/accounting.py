"""Epsilon for each observer, composed from what every round really released (``dp-accounting`` does
all the privacy math; nothing here is an accountant of its own).

Each DP round writes its mechanism into ``RoundRecord.privacy`` (the keys below) and the clients whose
update reached the server into ``RoundRecord.contributed``. :class:`RunAccountant` composes a run's
records, whatever settings each round ran with (a resumed run's checkpointed rounds included), into
epsilon at the run's delta for three observers:

- **observers of the released models** (``epsilon``): everyone who sees the global model after each
  round but not the server's own logs. A round whose client sample was secret (drawn from OS
  randomness, never written anywhere the observer reads) is a Poisson-subsampled Gaussian mechanism
  (amplification by sampling); a round whose sample the observer may know counts only for the clients
  in it, as an unamplified Gaussian mechanism; a DP-FTRL round is part of its tree's aggregation.
- **the server** (``epsilon_server``): it chose the sample, so nothing is amplified; it sees every update
  in the clear under central DP (no guarantee: ``inf``) and only the noised sum under distributed DP,
  less the noise shares of the colluding clients the threat model allows (``noise_server``).
- **one training example** (``sample_epsilon``): DP-SGD in local training, each client's Poisson
  batches drawn on its device; the largest over the clients.

A round without DP noise that changed the model (a non-private round in a resumed run's history, or a
secure-aggregation round without DP) makes the client-level epsilons ``inf``: no finite epsilon holds.

For a set of unamplified Gaussian rounds, one client's privacy loss is that of the composition of its
rounds; the client with the most such rounds (weighted by ``1 / sigma^2``) is the worst case, and its
rounds are composed by ``dp-accounting`` as they are.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import dp_accounting

from ..types import RoundRecord, TrainConfig
from .dp import _accountant

if TYPE_CHECKING:
    from .server import PrivacyConfig

# RoundRecord.privacy keys a DP round writes
MECHANISM = "dp_mechanism"  # 1: Poisson-sampled Gaussian (DP-FedAvg); 2: tree aggregation (DP-FTRL)
POISSON, TREE = 1.0, 2.0
RATE = "dp_q"  # the Poisson sampling rate of the round (POISSON)
SIGMA = "noise_multiplier"  # the noise multiplier the run calibrated
SIGMA_RELEASE = "noise_release"  # the noise multiplier actually in the released sum (>= SIGMA)
SIGMA_SERVER = "noise_server"  # the part the server cannot remove; 0: it saw the updates (central DP)
SECRET = "sample_secret"  # 1: the sample came from OS randomness and is never published
TREE_INDEX = "tree"  # DP-FTRL: the tree (epoch) the round belongs to
SEEDED = "seeded"  # 1: noise and sampling came from a fixed seed (a simulation: reproducible, not secret)
# the probability that the round's Poisson sample was too small to run (distributed DP: it is then not
# released, which says something of the sample's size): delta is spent on it
UNRUNNABLE = "dp_unrunnable"
EPSILON, EPSILON_SERVER, SAMPLE_EPSILON = "epsilon", "epsilon_server", "sample_epsilon"


@dataclass(frozen=True)
class DPSGDSettings:
    """What sample-level accounting needs of local training (``TrainConfig``'s DP-SGD fields)."""

    noise: float
    epochs: int
    batch_size: int


def dp_sgd_steps(n: int, epochs: int, batch_size: int) -> int:
    """DP-SGD steps a client of ``n`` examples takes in one round (``epochs * ceil(n / batch)``)."""
    return epochs * max(1, math.ceil(n / batch_size)) if n > 0 else 0


class RunAccountant:
    """The epsilons of a run so far, updated round by round (:meth:`add`) or rebuilt from a history.

    Args:
        delta: the client-level epsilons' delta.
        client_level: whether the run reports client-level epsilons (client-level DP is on).
        dp_sgd: DP-SGD's settings (None: no sample-level epsilon).
        examples: each client's example count (sample-level accounting needs the clients' batch rates);
            None for a client whose count is unknown makes the sample-level epsilon ``inf``.
        accountant: "rdp" or "pld" (``dp-accounting``'s accountants).
        sample_delta: the sample-level epsilon's delta (default: ``delta``).
    """

    def __init__(
        self,
        delta: float,
        client_level: bool,
        dp_sgd: DPSGDSettings | None = None,
        examples: Callable[[int], int | None] | None = None,
        accountant: str = "rdp",
        sample_delta: float | None = None,
    ) -> None:
        self.sample_delta = delta if sample_delta is None else sample_delta
        if dp_sgd is not None and examples is None:
            raise ValueError("sample-level accounting needs each client's example count")
        self.delta, self.client_level, self.dp_sgd, self.examples, self.kind = (
            delta,
            client_level,
            dp_sgd,
            examples,
            accountant,
        )
        # secret-sample Poisson rounds, composed as they come; the second accountant holds the same rounds
        # under the neighbouring relation dp-accounting analyses DP-FTRL's trees in (rdp only)
        self._amplified = _accountant(accountant)
        self._amplified_tree = _accountant(accountant, tree=True) if accountant == "rdp" else None
        self._public: dict[int, list[float]] = {}  # client -> sigma of each public-sample round it was in
        self._server: dict[int, list[float]] = {}  # client -> sigma the server could not remove, per round
        self._trees: dict[int, tuple[float, int]] = {}  # tree index -> (sigma, rounds so far)
        self._unprotected = False  # some released round carried no DP noise
        self._server_saw_updates = False  # some round gave the server updates in the clear (central DP)
        self._seeded = False
        self._delta_spent = 0.0  # on rounds whose small sample could not be released (UNRUNNABLE)
        self._steps: dict[int, int] = {}  # DP-SGD steps per client
        self._sample_eps: dict[tuple[int, int], float] = {}  # (n, steps) -> epsilon
        self._sample_worst = 0.0

    @classmethod
    def replay(cls, history: Sequence[RoundRecord], **kw) -> RunAccountant:
        """An accountant that has taken every record of ``history`` (a resumed run's)."""
        acc = cls(**kw)
        for rec in history:
            acc.add(rec)
        return acc

    def add(self, rec: RoundRecord) -> dict[str, float]:
        """Take one round's record; returns the epsilons after it (also written into ``rec.privacy``)."""
        p = rec.privacy
        released = not rec.skipped and bool(rec.contributed or p.get(MECHANISM))
        if self.client_level and (released or p.get(MECHANISM) is not None):
            self._add_client_level(rec)
        if self.dp_sgd is not None:
            self._add_dp_sgd(rec)
        self._seeded = self._seeded or bool(p.get(SEEDED))
        out = self.epsilons()
        p.update(out)
        return out

    def _add_client_level(self, rec: RoundRecord) -> None:
        p = rec.privacy
        mech = p.get(MECHANISM)
        self._delta_spent += float(p.get(UNRUNNABLE, 0.0))
        if mech is not None and rec.skipped:
            return  # nothing released (the chance of that, where it depends on the sample, is UNRUNNABLE)
        if mech is None or not p.get(SIGMA_RELEASE):
            self._unprotected = True  # released without noise: no finite epsilon holds from here on
            return
        sigma = float(p[SIGMA_RELEASE])
        if mech == POISSON and p.get(SECRET):
            event = dp_accounting.PoissonSampledDpEvent(float(p[RATE]), dp_accounting.GaussianDpEvent(sigma))
            self._amplified.compose(event)
            if self._amplified_tree is not None:
                self._amplified_tree.compose(event)
        elif mech == POISSON:
            for c in rec.contributed:
                self._public.setdefault(c, []).append(sigma)
        elif mech == TREE:
            tree = int(p[TREE_INDEX])
            have = self._trees.get(tree)
            if have is not None and have[0] != sigma:
                raise ValueError(f"round {rec.round}: tree {tree} changes its noise multiplier ({have[0]} -> {sigma})")
            self._trees[tree] = (sigma, (have[1] if have else 0) + 1)
        else:
            raise ValueError(f"round {rec.round}: unknown DP mechanism {mech!r}")
        server = float(p.get(SIGMA_SERVER, 0.0))
        if server <= 0:
            self._server_saw_updates = True
        else:
            for c in rec.contributed:
                self._server.setdefault(c, []).append(server)

    def _add_dp_sgd(self, rec: RoundRecord) -> None:
        assert self.dp_sgd is not None and self.examples is not None
        s = self.dp_sgd
        for c in rec.contributed:
            n = self.examples(c)
            if n is None:  # its batch rate is unknown, so no finite epsilon can be claimed
                self._sample_worst = math.inf
                continue
            steps = self._steps.get(c, 0) + dp_sgd_steps(n, s.epochs, s.batch_size)
            self._steps[c] = steps
            if n > 0 and steps and s.noise <= 0:  # clipping without noise: no finite epsilon
                self._sample_worst = math.inf
            elif n > 0 and steps:
                key = (n, steps)
                if key not in self._sample_eps:
                    event = dp_accounting.SelfComposedDpEvent(
                        dp_accounting.PoissonSampledDpEvent(min(1.0, s.batch_size / n), _gaussian(s.noise)), steps
                    )
                    self._sample_eps[key] = self._epsilon(event, self.sample_delta)
                self._sample_worst = max(self._sample_worst, self._sample_eps[key])

    def epsilons(self) -> dict[str, float]:
        """``epsilon`` (observers of the released models), ``epsilon_server``, ``sample_epsilon`` and,
        for a simulation with seeded noise and sampling, ``seeded``; only those the run reports."""
        out: dict[str, float] = {}
        if self.client_level:
            if self._delta_spent >= self.delta:  # the run spent its delta on rounds too small to run
                self._unprotected = True
            out[EPSILON] = math.inf if self._unprotected else self._release_epsilon()
            blind = self._unprotected or self._server_saw_updates
            out[EPSILON_SERVER] = math.inf if blind else self._worst_client(self._server, _accountant(self.kind), [])
        if self.dp_sgd is not None:
            out[SAMPLE_EPSILON] = self._sample_worst
        if self._seeded:
            out[SEEDED] = 1.0
        return out

    def _release_epsilon(self) -> float:
        """The amplified rounds, the worst client's public-sample rounds and every DP-FTRL tree (each
        client is in at most one round of a tree: :mod:`.ftrl` samples so)."""
        trees = [dp_accounting.SingleEpochTreeAggregationDpEvent(s, n) for _, (s, n) in sorted(self._trees.items())]
        if trees and self._amplified_tree is None:
            raise ValueError("DP-FTRL's tree aggregation needs the rdp accountant (dp-accounting's PLD has none)")
        base = self._amplified_tree if trees else self._amplified
        assert base is not None
        return self._worst_client(self._public, base, trees)

    def _worst_client(
        self, rounds: dict[int, list[float]], base: dp_accounting.PrivacyAccountant, extra: list[dp_accounting.DpEvent]
    ) -> float:
        """Epsilon of ``base``'s events, ``extra`` and the unamplified Gaussian rounds in ``rounds`` of the
        worst client (the one with the largest sum of ``1 / sigma^2``: a Gaussian round's privacy loss
        grows with it), composed by ``dp-accounting``."""
        worst = max(rounds.values(), key=lambda s: sum(1.0 / x**2 for x in s), default=[])
        events = [_gaussian(s) for s in worst] + extra
        acc = copy.deepcopy(base)
        if events:
            acc.compose(dp_accounting.ComposedDpEvent(events))
        return _finite_or_inf(acc.get_epsilon(self.delta - self._delta_spent))

    def _epsilon(self, event: dp_accounting.DpEvent, delta: float) -> float:
        acc = _accountant(self.kind)
        acc.compose(event)
        return _finite_or_inf(acc.get_epsilon(delta))


def _gaussian(sigma: float) -> dp_accounting.DpEvent:
    """One Gaussian mechanism of noise multiplier ``sigma`` (no noise: a non-private event)."""
    return dp_accounting.GaussianDpEvent(sigma) if sigma > 0 else dp_accounting.NonPrivateDpEvent()


def _finite_or_inf(eps: float) -> float:
    return float(eps) if math.isfinite(eps) else math.inf


def make_accountant(
    train: TrainConfig, privacy: PrivacyConfig | None, sample_delta: float, examples: Callable[[int], int | None]
) -> RunAccountant | None:
    """The accountant of a run with local training ``train`` and private rounds ``privacy`` (None when
    its rounds are not private); None when the run has no DP at all. ``examples(c)`` is client c's
    example count (sample-level accounting), ``sample_delta`` DP-SGD's delta."""
    dpc = privacy.dp if privacy is not None else None
    sgd = None
    if train.dp_sample_clip is not None:
        sgd = DPSGDSettings(train.dp_sample_noise, train.epochs, train.batch_size)
    if dpc is None and sgd is None:
        return None
    return RunAccountant(
        dpc.delta if dpc is not None else sample_delta,
        dpc is not None,
        sgd,
        examples,
        dpc.accountant if dpc is not None else "rdp",
        sample_delta,
    )
