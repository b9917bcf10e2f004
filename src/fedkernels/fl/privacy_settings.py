"""The one validator of a run's privacy settings, shared by the CLI, config files, the Python API and
Flower's run config.

Every path that starts a private run turns its settings into a :class:`PrivacySettings` with
:func:`privacy_settings`, or builds :class:`~fedkernels.fl.privacy.server.PrivacyConfig` and
:class:`~fedkernels.fl.privacy.dp.DPConfig` directly, whose own checks are the functions here. So a
value one path refuses is refused by all of them, with a message naming the setting as that path
spells it (``dp_clip`` in a config file, ``dp-clip`` in Flower's run config). This module needs no
optional extra, so a run without privacy is checked without them.

Nothing here treats a bad value as "off": NaN, infinities, negative clips and noise are errors. Only
``None`` (or, in Flower's run config where every key has a declared default, exactly 0) means unset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# The largest noise multiplier and target epsilon a run accepts: beyond them the noise drowns any
# update, or the guarantee says nothing, and the accountant's numerics become unreliable.
MAX_NOISE_MULTIPLIER = 1e4
MAX_TARGET_EPSILON = 1e3

SETTINGS = (
    "secagg",
    "secagg_dropouts",
    "secagg_bits",
    "secagg_bound",
    "secagg_degree",
    "secagg_corrupt_fraction",
    "secagg_dropout_fraction",
    "secagg_weight_cap",
    "l1diff_segments",
    "dp_clip",
    "dp_noise",
    "target_epsilon",
    "dp_delta",
    "dp_mechanism",
    "dp_seeded",
    "dp_sample_clip",
    "dp_sample_noise",
)
"""The privacy settings, by their config-file names (the CLI's flags are these with dashes)."""

DEFAULTS: dict[str, Any] = {
    "secagg": False,
    "secagg_dropouts": None,
    "secagg_bits": 32,
    "secagg_bound": 4.0,
    "secagg_degree": None,
    "secagg_corrupt_fraction": 0.1,
    "secagg_dropout_fraction": 0.1,
    "secagg_weight_cap": 4096.0,
    "l1diff_segments": 0,
    "dp_clip": None,
    "dp_noise": None,
    "target_epsilon": None,
    "dp_delta": 1e-5,
    "dp_mechanism": "poisson",
    "dp_seeded": False,
    "dp_sample_clip": None,
    "dp_sample_noise": 0.0,
}


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_real(
    name: str,
    value: object,
    *,
    low: float,
    high: float = math.inf,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """``value`` as a float, checked to lie in the interval from ``low`` to ``high`` (open ends where
    asked). Raises ValueError naming ``name`` for anything else (NaN, infinities, bools, text)."""
    ok = _is_number(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (v > low if open_low else v >= low) and (v < high if open_high else v <= high)
    if not ok:
        left, right = "(" if open_low else "[", ")" if open_high else "]"
        raise ValueError(f"{name} must be a finite number in {left}{low:g}, {high:g}{right}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_int(name: str, value: object, *, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")
    return value


def check_client_dp(
    clip: object, noise: object, target_epsilon: object, delta: object, spell: Callable[[str], str]
) -> None:
    """Client-level DP's settings (``clip`` set: DP is on): a clip, exactly one of the noise multiplier
    and a target epsilon, and delta; each finite and in range. ``spell`` names a setting
    (``"dp_clip"`` etc.) as the caller's user wrote it."""
    if clip is None:
        if noise is not None or target_epsilon is not None:
            raise ValueError(
                f"{spell('dp_noise')} / {spell('target_epsilon')} need {spell('dp_clip')} "
                "(the L2 bound the noise is calibrated to)"
            )
        return
    check_real(spell("dp_clip"), clip, low=0, open_low=True, high=1e6)
    if (noise is None) == (target_epsilon is None):
        raise ValueError(
            f"{spell('dp_clip')} needs exactly one of {spell('dp_noise')} (the noise multiplier) "
            f"and {spell('target_epsilon')}"
        )
    if noise is not None:
        check_real(spell("dp_noise"), noise, low=0, high=MAX_NOISE_MULTIPLIER)
    if target_epsilon is not None:
        check_real(spell("target_epsilon"), target_epsilon, low=0, open_low=True, high=MAX_TARGET_EPSILON)
    check_real(spell("dp_delta"), delta, low=0, high=1, open_low=True, open_high=True)


def check_dp_sgd(clip: object, noise: object, spell: Callable[[str], str]) -> None:
    """Sample-level DP-SGD's settings: a per-example clip (None: off) and a noise multiplier."""
    check_real(spell("dp_sample_noise"), noise, low=0, high=MAX_NOISE_MULTIPLIER)
    if clip is None:
        if noise:
            raise ValueError(f"{spell('dp_sample_noise')} needs {spell('dp_sample_clip')}")
        return
    check_real(spell("dp_sample_clip"), clip, low=0, open_low=True, high=1e6)


@dataclass(frozen=True)
class PrivacySettings:
    """A run's privacy settings after :func:`privacy_settings`: what a private server needs
    (``privacy``: None when rounds are not private) and DP-SGD's local-training settings."""

    privacy: Any  # PrivacyConfig | None (typed loosely: this module imports no optional extra)
    dp_sample_clip: float | None
    dp_sample_noise: float
    dp_seeded: bool = False  # DP's randomness from the run seed: a reproducible simulation, not private

    @property
    def any(self) -> bool:
        """Whether anything is protected (private rounds or DP-SGD)."""
        return self.privacy is not None or self.dp_sample_clip is not None


def privacy_settings(
    values: Mapping[str, Any], spell: Callable[[str], str] = str, clients_per_round: int | None = None, seed: int = 0
) -> PrivacySettings:
    """Validate privacy settings and build what the run uses.

    Args:
        values: settings by their :data:`SETTINGS` names (missing ones take :data:`DEFAULTS`; an
            unknown name is an error).
        spell: how to name a setting in an error (e.g. ``lambda n: n.replace("_", "-")`` for Flower).
        clients_per_round: with secure aggregation, the SecAgg+ graph of a round of this many clients
            is checked too: settings no graph makes secure and correct for them (an odd degree, more
            dropouts than neighbours, fractions too large for the session) are refused.
        seed: the run's seed: with ``dp_seeded`` the simulation's noise seed.

    Returns:
        the :class:`PrivacySettings`; ``privacy`` is a
        :class:`~fedkernels.fl.privacy.server.PrivacyConfig` when secure aggregation or client-level
        DP is on (this needs the extra ``fedkernels[privacy]``), else None.

    Raises:
        ValueError: the first bad setting or combination, named as ``spell`` writes it.
    """
    unknown = sorted(set(values) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown privacy settings {[spell(n) for n in unknown]}")
    v = {**DEFAULTS, **values}
    for name in ("secagg", "dp_seeded"):
        if not isinstance(v[name], bool):
            raise ValueError(f"{spell(name)} must be true or false, got {v[name]!r}")
    if v["dp_mechanism"] not in ("poisson", "tree"):
        raise ValueError(f"{spell('dp_mechanism')} must be 'poisson' or 'tree', got {v['dp_mechanism']!r}")
    if v["dp_mechanism"] != "poisson" and v["dp_clip"] is None:
        raise ValueError(f"{spell('dp_mechanism')} {v['dp_mechanism']!r} needs {spell('dp_clip')}")
    check_real(spell("secagg_bound"), v["secagg_bound"], low=1.0, high=1e9)
    check_int(spell("secagg_bits"), v["secagg_bits"], low=8, high=62)
    for name in ("secagg_dropouts", "secagg_degree"):
        if v[name] is not None:
            check_int(spell(name), v[name], low=0)
    for name in ("secagg_corrupt_fraction", "secagg_dropout_fraction"):
        check_real(spell(name), v[name], low=0.0, high=1.0, open_high=True)
    check_real(spell("secagg_weight_cap"), v["secagg_weight_cap"], low=1.0, high=2.0**40)
    segments = check_int(spell("l1diff_segments"), v["l1diff_segments"], low=0)
    check_client_dp(v["dp_clip"], v["dp_noise"], v["target_epsilon"], v["dp_delta"], spell)
    check_dp_sgd(v["dp_sample_clip"], v["dp_sample_noise"], spell)
    private = v["secagg"] or v["dp_clip"] is not None
    if segments and not private:
        raise ValueError(f"{spell('l1diff_segments')} applies to private rounds (secagg or dp_clip)")
    sample_clip = None if v["dp_sample_clip"] is None else float(v["dp_sample_clip"])
    seeded = v["dp_seeded"]
    if seeded and not (private or sample_clip is not None):
        raise ValueError(
            f"{spell('dp_seeded')} applies to runs with DP ({spell('dp_clip')} or {spell('dp_sample_clip')})"
        )
    if not private:
        return PrivacySettings(None, sample_clip, float(v["dp_sample_noise"]), seeded)
    from .privacy.dp import DPConfig  # the extra fedkernels[privacy]
    from .privacy.server import PrivacyConfig

    dpc = None
    if v["dp_clip"] is not None:
        dpc = DPConfig(
            float(v["dp_clip"]),
            None if v["dp_noise"] is None else float(v["dp_noise"]),
            None if v["target_epsilon"] is None else float(v["target_epsilon"]),
            float(v["dp_delta"]),
            mechanism=v["dp_mechanism"],
        )
    privacy = PrivacyConfig(
        secagg=v["secagg"],
        max_dropouts=v["secagg_dropouts"],
        bits=v["secagg_bits"],
        bound=float(v["secagg_bound"]),
        degree=v["secagg_degree"],
        l1diff_segments=segments,
        dp=dpc,
        corrupt_fraction=float(v["secagg_corrupt_fraction"]),
        dropout_fraction=float(v["secagg_dropout_fraction"]),
        weight_cap=float(v["secagg_weight_cap"]),
        noise_seed=seed if seeded else None,
    )
    if privacy.secagg and clients_per_round is not None:
        try:
            privacy.graph_for(clients_per_round)
        except ValueError as e:
            raise ValueError(f"{spell('secagg')} with {clients_per_round} clients a round: {e}") from None
    return PrivacySettings(privacy, sample_clip, float(v["dp_sample_noise"]), seeded)


def check_strategy_dp(strategy: Any, client_dp: bool, sample_dp: bool) -> None:
    """Refuse DP for a strategy whose run would release something DP does not cover.

    Args:
        strategy: the algorithm (a :class:`~fedkernels.fl.strategy.Strategy`).
        client_dp: client-level DP is on.
        sample_dp: sample-level DP-SGD is on.

    Raises:
        ValueError: the strategy releases setup statistics of the clients' data without noise (FedALC's
            label co-occurrences, FedALC-fixed's embeddings learned from them), or, for DP-SGD, its local
            training does not run DP-SGD's per-example steps (L1Diff's one full gradient, LabelPrior's counts).
    """
    if not (client_dp or sample_dp):
        return
    from .round import has_setup_exchange
    from .strategy import trains_with_dp_sgd

    if has_setup_exchange(strategy) or strategy.setup_needs_client_data():
        raise ValueError(
            f"{strategy.name}: its setup releases statistics of the clients' data (e.g. FedALC's label "
            "co-occurrences) without noise, outside the DP accountant, so no epsilon would hold; run it "
            "without DP (FedAwS is the same model without setup statistics)"
        )
    if sample_dp and not trains_with_dp_sgd(strategy):
        raise ValueError(
            f"{strategy.name}'s local training does not take DP-SGD's per-example steps (dp_sample_clip would "
            "be ignored); run it without DP-SGD"
        )
