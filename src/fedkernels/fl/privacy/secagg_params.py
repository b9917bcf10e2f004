"""SecAgg+'s neighbours ``k`` and Shamir threshold from the session size and the threat model (Bell et
al., CCS 2020), as the authors' implementation chooses them for a semi-honest server (Google's
``fcp/secagg/server/graph_parameter_finder``): the smallest even ``k`` for which a random Harary
graph of degree ``k`` meets, with probability over the graph's seed, the three conditions of the
paper's security and correctness argument, else the complete graph when it meets them.

With ``n`` participants, ``C = floor(corrupt * n)`` clients colluding with the server and
``D = ceil(dropout * n)`` that drop out (the authors round this down too; rounding up plans for a
dropout in every session when ``dropout > 0``), where a colluder may also withhold its answers:

1. **The honest survivors stay connected** (else the server learns the sum of one part of them): a
   Harary graph over a random ring order loses connectivity only when the removed ``C + D`` clients
   cover ``k / 2`` consecutive ring positions at two separate places; a union bound over those
   ``n (n - k - 1) / 2`` pairs of places must stay below ``2^-(security + 1)``.
2. **No honest client has ``threshold`` corrupt neighbours** (else they rebuild its self-mask seed):
   the number of corrupt clients among an honest client's ``k`` neighbours is hypergeometric
   (``C`` corrupt among its ``n - 1`` peers); ``threshold`` exceeds the smallest ``t1`` with
   ``P[corrupt neighbours > t1] <= 2^-(security + 1) / n`` (a union bound over the clients).
3. **Every client keeps ``threshold`` answering neighbours** (else its seed cannot be rebuilt and
   the round is refused): the neighbours that neither drop nor are corrupt are hypergeometric too,
   and ``P[fewer than threshold] <= 2^-correctness / n``.

Conditions 1 and 2 together bound the probability that the server learns anything about honest
inputs beyond the sum of all honest survivors by ``2^-security``; condition 3 bounds the probability
that a round fails by ``2^-correctness``. They hold for corruption and dropouts chosen independently of
the graph, which is why the graph seed is drawn from OS randomness for every session (a seed
derived from the run seed is known before the clients are corrupted).

The probabilities are computed exactly in log space (``math.lgamma``), not approximated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SECURITY_BITS = 40  # statistical security sigma: the graph is bad for privacy with probability <= 2^-40
CORRECTNESS_BITS = 20  # eta: a round fails to unmask with probability <= 2^-20 within the dropout fraction
_EPS = 1e-12  # keeps floor(fraction * n) from rounding down at an exact product (0.1 * 30)


@dataclass(frozen=True)
class GraphParams:
    """One session's graph: ``k`` neighbours per client (even, or ``n - 1``: everyone) and the number
    of shares (``threshold``) that rebuild a client's self-mask seed."""

    n: int
    k: int
    threshold: int

    @property
    def max_dropouts(self) -> int:
        """Dropouts (or withheld answers) always tolerated, wherever they fall: ``k - threshold``."""
        return self.k - self.threshold


def _counts(n: int, corrupt: float, dropout: float) -> tuple[int, int]:
    """``(C, D)``: the colluders (rounded down, as the authors' code does) and the dropouts planned for
    (rounded up: at least one whenever ``dropout > 0``, so a small session plans for a dropout)."""
    return math.floor(corrupt * n + _EPS), math.ceil(dropout * n - _EPS)


def _log_pmf(x: int, population: int, marked: int, draws: int) -> float:
    """log P[X = x], X hypergeometric: ``draws`` from ``population`` of which ``marked`` are marked."""
    if x < max(0, draws - (population - marked)) or x > min(draws, marked):
        return -math.inf
    lg = math.lgamma
    return (
        lg(marked + 1)
        - lg(x + 1)
        - lg(marked - x + 1)
        + lg(population - marked + 1)
        - lg(draws - x + 1)
        - lg(population - marked - draws + x + 1)
        - (lg(population + 1) - lg(draws + 1) - lg(population - draws + 1))
    )


def _log_sum(logs: list[float]) -> float:
    top = max(logs, default=-math.inf)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in logs))


def log_tail_above(x: int, population: int, marked: int, draws: int) -> float:
    """log P[X > x] for X hypergeometric (``draws`` from ``population``, ``marked`` marked)."""
    return _log_sum([_log_pmf(j, population, marked, draws) for j in range(x + 1, draws + 1)])


def log_tail_below(x: int, population: int, marked: int, draws: int) -> float:
    """log P[X < x] for X hypergeometric."""
    return _log_sum([_log_pmf(j, population, marked, draws) for j in range(0, min(x, draws + 1))])


def log_disconnect_bound(n: int, k: int, removed: int) -> float:
    """log of the union bound on the probability that removing ``removed`` clients, placed uniformly
    at random on the ring, disconnects a Harary graph of even degree ``k < n - 1``: two separate runs
    of ``k / 2`` removed clients are needed, ``n (n - k - 1) / 2`` pairs of places, each with
    probability ``removed! (n - k)! / ((removed - k)! n!)`` that all ``k`` of its clients are removed."""
    if removed < k or n - k - 1 <= 0:
        return -math.inf
    lg = math.lgamma
    pairs = math.log(n) + math.log(n - k - 1) - math.log(2)
    return pairs + lg(removed + 1) - lg(removed - k + 1) + lg(n - k + 1) - lg(n + 1)


def _bounds(n: int, k: int, corrupt: float, dropout: float, security: int, correctness: int) -> tuple[int, int, str]:
    """``(lowest, highest, why)``: the thresholds that meet conditions 2 and 3 for degree ``k``, or
    an empty range (lowest > highest) and why."""
    c, d = _counts(n, corrupt, dropout)
    if c + d >= n - 1:
        return 1, 0, f"{c} colluding and {d} dropped clients leave at most one honest client to sum"
    if k < n - 1 and log_disconnect_bound(n, k, c + d) > -(security + 1) * math.log(2):
        return (
            1,
            0,
            (
                f"{c} colluding and {d} dropped clients disconnect a graph of {k} neighbours with probability "
                f"above 2^-{security + 1} (raise the degree)"
            ),
        )
    if k == n - 1:  # every other client is a neighbour: the counts are exact
        lowest, highest = c + 1, n - 1 - c - d
    else:
        sec = -(security + 1) * math.log(2) - math.log(n)
        lowest = next(x for x in range(k + 1) if log_tail_above(x, n - 1, c, k) <= sec) + 1
        ok = -correctness * math.log(2) - math.log(n)
        highest = max((r for r in range(k + 1) if log_tail_below(r, n - 1, n - 1 - c - d, k) <= ok), default=0)
    lowest = max(lowest, min(2, k))  # one colluder alone never rebuilds a seed
    why = (
        f"a threshold must exceed the colluders a client may have among its {k} neighbours ({lowest - 1}) "
        f"and not exceed the neighbours that still answer ({highest}) with {c} colluding and {d} dropped of {n}"
    )
    return lowest, highest, why


def graph_params(
    n: int,
    corrupt: float,
    dropout: float,
    degree: int | None = None,
    max_dropouts: int | None = None,
    security: int = SECURITY_BITS,
    correctness: int = CORRECTNESS_BITS,
) -> GraphParams:
    """The session graph for ``n`` participants under the threat model.

    Args:
        n: participants (>= 2).
        corrupt: the fraction of participants that may collude with the server, in [0, 1).
        dropout: the fraction that may drop out, in [0, 1).
        degree: an explicit ``k`` (even, or ``>= n - 1``: everyone), checked; None: the smallest that works.
        max_dropouts: an explicit ``k - threshold``, checked; None: the smallest safe threshold.
        security, correctness: sigma and eta in bits.

    Raises:
        ValueError: no graph meets the conditions, or the explicit ``degree``/``max_dropouts`` do not
            (the message says which condition fails and what to change).
    """
    if n < 2:
        raise ValueError(f"secure aggregation needs at least 2 participants, got {n}")
    for name, v in (("corrupt fraction", corrupt), ("dropout fraction", dropout)):
        if not (isinstance(v, (int, float)) and 0 <= v < 1):
            raise ValueError(f"the {name} must lie in [0, 1), got {v!r}")
    if degree is not None:
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise ValueError(f"degree must be an integer >= 1, got {degree!r}")
        k = min(degree, n - 1)
        if k != n - 1 and k % 2:
            raise ValueError(f"degree must be even (a Harary graph) or >= {n - 1} (every other client), got {degree}")
        candidates = [k]
    else:
        candidates = [*range(2, n - 1, 2), n - 1]
    if max_dropouts is not None and (isinstance(max_dropouts, bool) or not isinstance(max_dropouts, int)):
        raise ValueError(f"max_dropouts must be an integer >= 0, got {max_dropouts!r}")
    why = ""
    for k in candidates:
        lowest, highest, why = _bounds(n, k, corrupt, dropout, security, correctness)
        r = lowest if max_dropouts is None else k - max_dropouts
        if lowest <= r <= highest and 1 <= r <= k:
            return GraphParams(n, k, r)
        if max_dropouts is not None and lowest <= highest:
            why = (
                f"max_dropouts {max_dropouts} makes the threshold {k - max_dropouts}, outside [{lowest}, {highest}] "
                f"for {k} neighbours"
            )
    c, d = _counts(n, corrupt, dropout)
    raise ValueError(
        f"no SecAgg+ graph for {n} clients is secure against {c} colluding ({corrupt:g} of them) and correct "
        f"with {d} dropping out ({dropout:g}): {why}; lower the fractions or sum over more clients"
    )
