"""Client-level DP's per-round mechanism: who takes part, how much noise each party adds, whether a
round may be released, and the record the accountant (:mod:`.accounting`) composes.

- **The sample.** DP-FedAvg's privacy amplification assumes nobody outside the server knows which
  clients a round used. So a round's Poisson sample is drawn from OS randomness, unless the run is a
  seeded simulation (``PrivacyConfig.noise_seed``: reproducible, and its records say ``seeded``); the
  run's outputs never write it (:func:`published_record`).
- **Distributed noise** (secure aggregation): each of a round's ``m`` clients adds a share of variance
  ``sigma^2 C^2 / h`` with ``h = m - t - T``: after ``t`` dropouts and with ``T`` clients colluding with
  the server (who subtract their own shares), the ``h`` honest survivors still carry ``sigma^2 C^2``. A
  round whose survivors fall below ``m - t`` is not released (its sum would carry less than that).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np
import scipy.stats

from ..round import select_clients
from ..seeding import numpy_rng
from ..types import RoundRecord
from . import accounting as acct


def poisson_clients(seed: int | None, round: int, num_clients: int, q: float) -> list[int]:
    """The clients of a DP round: each independently with probability ``q``, ascending. ``seed``
    None draws from OS randomness (the private choice); a seed makes a reproducible simulation."""
    if seed is None:
        rng = np.random.default_rng(int.from_bytes(os.urandom(16), "little"))
    else:
        rng = numpy_rng(seed, "poisson-select", round)
    return [int(c) for c in (rng.random(num_clients) < q).nonzero()[0]]


def round_clients(dp: bool, seeded: bool, run_seed: int, round: int, num_clients: int, per_round: int) -> list[int]:
    """A private round's clients: with DP a Poisson sample at rate ``per_round / num_clients`` (from OS
    randomness unless ``seeded``), else the run's usual seeded fixed-size sample."""
    if not dp:
        return select_clients(run_seed, round, num_clients, per_round)
    return poisson_clients(run_seed if seeded else None, round, num_clients, per_round / num_clients)


def honest_floor(m: int, dropouts: int, colluders: int) -> int:
    """``h = m - t - T``: the clients whose noise shares survive ``t`` dropouts and ``T`` colluders."""
    return m - dropouts - colluders


def share_std(sigma: float, clip: float, honest: int) -> float:
    """Each client's noise std in distributed DP: ``h`` shares of it carry the calibrated ``sigma clip``."""
    if honest < 1:
        raise ValueError(f"no honest client is left to carry the noise (h = {honest})")
    return sigma * clip / math.sqrt(honest)


def distributed_record(sigma: float, honest: int, survivors: int, colluders: int) -> dict[str, float]:
    """The noise multipliers of a released distributed-DP round: every survivor's share in the sum
    (what observers of the model face), the honest survivors' (what the server, with its colluders'
    shares subtracted, faces)."""
    return {
        acct.SIGMA_RELEASE: sigma * math.sqrt(survivors / honest),
        acct.SIGMA_SERVER: sigma * math.sqrt(max(0, survivors - colluders) / honest),
    }


def unrunnable_probability(num_clients: int, q: float, unrunnable: Callable[[int], bool]) -> float:
    """The probability that a Poisson round (rate ``q``) samples a number of clients ``m`` for which
    ``unrunnable(m)``, the larger of the two with and without any one client (its presence shifts ``m``
    by one). A round that is not released for such an ``m`` tells an observer something about the
    sample's size, which amplification by sampling does not account: the accountant spends this much of
    delta on it per round (:mod:`.accounting`)."""
    others = scipy.stats.binom(num_clients - 1, q)
    bad = [m for m in range(num_clients + 1) if unrunnable(m)]
    without = sum(float(others.pmf(m)) for m in bad if m <= num_clients - 1)
    with_one = sum(float(others.pmf(m - 1)) for m in bad if m >= 1)
    return max(without, with_one)


def poisson_record(q: float, sigma: float, seeded: bool, unrunnable: float = 0.0) -> dict[str, float]:
    """The mechanism keys every DP-FedAvg round writes (the noise multipliers are added by the path);
    ``unrunnable``: :func:`unrunnable_probability` of the round (distributed DP)."""
    out = {acct.MECHANISM: acct.POISSON, acct.RATE: q, acct.SIGMA: sigma, acct.SECRET: 1.0}
    if unrunnable:
        out[acct.UNRUNNABLE] = unrunnable
    if seeded:
        out[acct.SEEDED] = 1.0
    return out


def tree_record(tree: int, sigma: float, seeded: bool) -> dict[str, float]:
    """The keys a DP-FTRL round writes: its tree, the noise of every node (the server adds it, so it
    sees the updates or their exact sum: no guarantee against it), a public sample."""
    out = {
        acct.MECHANISM: acct.TREE,
        acct.TREE_INDEX: float(tree),
        acct.SIGMA: sigma,
        acct.SIGMA_RELEASE: sigma,
        acct.SIGMA_SERVER: 0.0,
        acct.SECRET: 0.0,
    }
    if seeded:
        out[acct.SEEDED] = 1.0
    return out


def published_record(rec: RoundRecord) -> RoundRecord:
    """``rec`` as a run's outputs may publish it: a round whose sample is secret (DP-FedAvg) loses its
    client ids (chosen, failed, contributors) and every per-round count that reveals how many clients
    took part (bytes, survivors, SecAgg+ bytes)."""
    if not rec.privacy.get(acct.SECRET):
        return rec
    counts = ("survivors", "secagg_bytes_up", "secagg_bytes_down")
    return RoundRecord(
        rec.round,
        [],
        [],
        0,
        0,
        metrics=dict(rec.metrics),
        seconds=rec.seconds,
        skipped=rec.skipped,
        privacy={k: v for k, v in rec.privacy.items() if k not in counts and not k.startswith("examples.")},
        contributed=[],
    )
