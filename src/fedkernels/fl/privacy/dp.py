"""Differential privacy: clipping, Gaussian noise calibrated to the clip, and epsilon from dp-accounting.

Client-level DP (DP-FedAvg, McMahan et al. 2018): each round samples every client independently with
probability ``q`` (Poisson sampling, exactly the accountant's model), clips each client's contribution
``x_k`` to L2 norm ``clip``, adds ``N(0, (noise * clip)^2)`` to the sum and divides by the fixed
denominator ``q * N``. Adding or removing one client changes the sum by at most ``clip``, so a round
is the Poisson-subsampled Gaussian mechanism with noise multiplier ``noise``; ``rounds`` of them
compose. Epsilon at ``delta`` comes from ``dp_accounting``'s RDP accountant (or its PLD accountant),
never from a formula written here.

Sample-level DP-SGD uses the same accountant with the sampling rate ``batch / n`` and the local step count.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import dp_accounting
import torch
from dp_accounting import pld, rdp

from ..privacy_settings import check_client_dp

ACCOUNTANTS = ("rdp", "pld")
MECHANISMS = ("poisson", "tree")


def _accountant(kind: str, tree: bool = False) -> dp_accounting.PrivacyAccountant:
    """A fresh ``dp-accounting`` accountant (``tree``: one that analyses DP-FTRL's tree aggregation,
    which ``dp-accounting`` defines under "replace one record with a special record"; its RDP of the
    Gaussian and Poisson-subsampled Gaussian mechanisms is the add-or-remove one)."""
    if kind == "rdp":
        relation = dp_accounting.NeighboringRelation
        return rdp.RdpAccountant(neighboring_relation=relation.REPLACE_SPECIAL if tree else relation.ADD_OR_REMOVE_ONE)
    if kind == "pld":
        if tree:
            raise ValueError("DP-FTRL's tree aggregation needs the rdp accountant (dp-accounting's PLD has none)")
        return pld.PLDAccountant()
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {kind!r}")


def round_event(q: float, noise: float) -> dp_accounting.DpEvent:
    """One round: the Poisson-subsampled (rate ``q``) Gaussian mechanism of noise multiplier ``noise``."""
    return dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(noise))


def epsilon(q: float, noise: float, steps: int, delta: float, accountant: str = "rdp") -> float:
    """Epsilon at ``delta`` after ``steps`` Poisson-subsampled Gaussian steps (``inf`` for noise 0)."""
    check_dp_args(q, noise, delta)
    if steps == 0:
        return 0.0
    if noise == 0:
        return math.inf
    acc = _accountant(accountant)
    acc.compose(round_event(q, noise), int(steps))
    return float(acc.get_epsilon(delta))


def tree_event(sigma: float, steps: int, per_tree: int) -> dp_accounting.DpEvent:
    """``steps`` DP-FTRL rounds, a tree restarted every ``per_tree`` rounds (each client in at most one
    round of a tree): the composition of the trees' aggregations."""
    full, rest = divmod(steps, per_tree)
    trees = [dp_accounting.SingleEpochTreeAggregationDpEvent(sigma, per_tree)] * full
    if rest:
        trees.append(dp_accounting.SingleEpochTreeAggregationDpEvent(sigma, rest))
    return dp_accounting.ComposedDpEvent(trees)


def noise_for_epsilon(
    q: float,
    steps: int,
    target_epsilon: float,
    delta: float,
    accountant: str = "rdp",
    per_tree: int | None = None,
) -> float:
    """The smallest noise multiplier whose ``steps`` rounds stay within ``target_epsilon`` at ``delta``
    (``dp_accounting.calibrate_dp_mechanism``): Poisson-subsampled Gaussian rounds at rate ``q``, or
    with ``per_tree`` DP-FTRL's trees of that many rounds."""
    check_dp_args(q, 1.0, delta)
    if not target_epsilon > 0 or not math.isfinite(target_epsilon):
        raise ValueError(f"target_epsilon must be finite and > 0, got {target_epsilon}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    try:
        sigma = dp_accounting.calibrate_dp_mechanism(
            lambda: _accountant(accountant, tree=per_tree is not None),
            lambda sigma: (
                tree_event(sigma, int(steps), per_tree)
                if per_tree is not None
                else dp_accounting.SelfComposedDpEvent(round_event(q, sigma), int(steps))
            ),
            target_epsilon,
            delta,
            dp_accounting.LowerEndpointAndGuess(1e-3, 1.0),
            tol=1e-4,
        )
    except (ValueError, ArithmeticError, dp_accounting.mechanism_calibration.NoBracketIntervalFoundError) as e:
        raise ValueError(
            f"target_epsilon {target_epsilon:g} at delta {delta:g} over {steps} steps at rate {q:g}: no noise "
            f"multiplier >= 1e-3 reaches it ({e}); ask for a smaller epsilon or give the noise multiplier"
        ) from None
    return float(sigma)


def check_dp_args(q: float, noise: float, delta: float) -> None:
    """Raise ValueError naming the bad argument."""
    if not 0 < q <= 1:
        raise ValueError(f"the sampling rate q must lie in (0, 1], got {q}")
    if not (noise >= 0 and math.isfinite(noise)):
        raise ValueError(f"the noise multiplier must be finite and >= 0, got {noise}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")


def global_norm(tensors: dict[str, torch.Tensor]) -> float:
    """The L2 norm of all tensors together (float64)."""
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in tensors.values()))


def clip(tensors: dict[str, torch.Tensor], bound: float) -> dict[str, torch.Tensor]:
    """``tensors`` scaled by ``min(1, bound / norm)`` (as one vector): the result's L2 norm is at most ``bound``."""
    norm = global_norm(tensors)
    if not math.isfinite(norm):
        return {n: torch.zeros_like(t) for n, t in tensors.items()}  # a non-finite update carries nothing
    scale = min(1.0, bound / norm) if norm > 0 else 1.0
    return {n: t * scale for n, t in tensors.items()}


def gaussian_like(tensors: dict[str, torch.Tensor], std: float, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Independent ``N(0, std^2)`` noise of each tensor's shape (float64)."""
    return {n: torch.randn(t.shape, dtype=torch.float64, generator=generator) * std for n, t in tensors.items()}


def noise_generator(seed: int | None) -> torch.Generator:
    """A generator for DP noise: from the OS's CSPRNG (``seed`` None, the only private choice: a noise
    seed the server could know lets it subtract the noise), or from ``seed`` for reproducible experiments."""
    g = torch.Generator()
    g.manual_seed(int.from_bytes(os.urandom(8), "little") if seed is None else seed)
    return g


@dataclass(frozen=True)
class DPConfig:
    """Client-level DP settings of a run.

    Args:
        clip: L2 bound on each client's contribution.
        noise: noise multiplier sigma (std of the sum's noise = sigma * clip); or None with ``target_epsilon``.
        target_epsilon: pick sigma so that the run's ``rounds`` stay within it at ``delta``.
        delta: the run's delta.
        accountant: "rdp" (default) or "pld".
        mechanism: "poisson" (DP-FedAvg: a secret Poisson sample each round, amplified) or "tree"
            (DP-FTRL: public participation, each client at most once an epoch, tree-aggregated noise;
            :mod:`fedkernels.fl.privacy.ftrl`).
    """

    clip: float
    noise: float | None = None
    target_epsilon: float | None = None
    delta: float = 1e-5
    accountant: str = "rdp"
    mechanism: str = "poisson"

    def __post_init__(self) -> None:
        """The checks :func:`~fedkernels.fl.privacy.settings.privacy_settings` runs, by field name."""
        if self.clip is None:
            raise ValueError("clip must be a finite number > 0, got None")
        names = {"dp_clip": "clip", "dp_noise": "noise", "target_epsilon": "target_epsilon", "dp_delta": "delta"}
        check_client_dp(self.clip, self.noise, self.target_epsilon, self.delta, names.__getitem__)
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {self.mechanism!r}")
        if self.mechanism == "tree" and self.accountant != "rdp":
            raise ValueError("the tree mechanism (DP-FTRL) needs the rdp accountant (dp-accounting's PLD has none)")
        if self.accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {self.accountant!r}")

    def noise_multiplier(self, q: float, rounds: int, per_tree: int | None = None) -> float:
        """sigma: the given one, or the one calibrated to ``target_epsilon`` over ``rounds`` (at rate ``q``;
        for the tree mechanism, trees of ``per_tree`` rounds)."""
        if self.noise is not None:
            return self.noise
        assert self.target_epsilon is not None
        tree = per_tree if self.mechanism == "tree" else None
        return noise_for_epsilon(q, rounds, self.target_epsilon, self.delta, self.accountant, tree)
