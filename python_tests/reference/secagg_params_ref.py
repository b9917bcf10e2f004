"""The SecAgg+ graph conditions in exact rational arithmetic (math.comb and Fraction, no logs, no
floats until the comparison): the slow, obvious reference for fedkernels.fl.privacy.secagg_params."""

from __future__ import annotations

import math
from fractions import Fraction


def hypergeom_pmf(x: int, population: int, marked: int, draws: int) -> Fraction:
    """P[X = x] exactly: C(marked, x) C(population - marked, draws - x) / C(population, draws)."""
    if x < 0 or x > draws or x > marked or draws - x > population - marked:
        return Fraction(0)
    return Fraction(math.comb(marked, x) * math.comb(population - marked, draws - x), math.comb(population, draws))


def conditions(n: int, k: int, threshold: int, corrupt: float, dropout: float, security: int, correctness: int) -> bool:
    """Whether a graph of degree k (even, or n - 1) and ``threshold`` meets the three conditions,
    with C = floor(corrupt n) colluders and D = ceil(dropout n) dropouts."""
    c = math.floor(Fraction(str(corrupt)) * n)  # the decimal the user wrote, not its binary float
    d = math.ceil(Fraction(str(dropout)) * n)
    if c + d >= n - 1:  # at most one honest client left to sum
        return False
    if k == n - 1:
        return max(c + 1, min(2, k)) <= threshold <= n - 1 - c - d
    removed = c + d
    if removed >= k:  # two runs of k / 2 removed clients: n (n - k - 1) / 2 pairs of places
        p_all = Fraction(math.comb(n - k, removed - k), math.comb(n, removed))
        if Fraction(n * (n - k - 1), 2) * p_all > Fraction(1, 2 ** (security + 1)):
            return False
    sec = Fraction(1, 2 ** (security + 1) * n)
    tail_above = [sum((hypergeom_pmf(j, n - 1, c, k) for j in range(x + 1, k + 1)), Fraction(0)) for x in range(k + 1)]
    t1 = next(x for x in range(k + 1) if tail_above[x] <= sec)
    cor = Fraction(1, 2**correctness * n)
    below = sum((hypergeom_pmf(j, n - 1, n - 1 - c - d, k) for j in range(threshold)), Fraction(0))
    return max(t1 + 1, min(2, k)) <= threshold and below <= cor


def smallest_graph(n: int, corrupt: float, dropout: float, security: int = 40, correctness: int = 20):
    """The smallest even k < n - 1 (then n - 1) with the smallest threshold meeting the conditions."""
    for k in [*range(2, n - 1, 2), n - 1]:
        for r in range(1, k + 1):
            if conditions(n, k, r, corrupt, dropout, security, correctness):
                return k, r
    return None
