"""SecAgg+'s k and threshold from the threat model (fedkernels.fl.privacy.secagg_params) against an
exact rational reference of the paper's three conditions; the union bound on disconnection against
a Monte-Carlo count of real Harary graphs; infeasible settings refused with the reason."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.fl.privacy.secagg_params import graph_params, log_disconnect_bound, log_tail_above, log_tail_below
from python_tests.reference.secagg_params_ref import conditions, hypergeom_pmf, smallest_graph

FRACTIONS = st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 60), corrupt=FRACTIONS, dropout=FRACTIONS)
def test_chosen_graph_is_the_smallest_that_meets_the_exact_conditions(n, corrupt, dropout):
    want = smallest_graph(n, corrupt, dropout)
    try:
        g = graph_params(n, corrupt, dropout)
    except ValueError as e:
        assert want is None, (n, corrupt, dropout, want)
        assert "no SecAgg+ graph" in str(e)
        return
    assert (g.k, g.threshold) == want
    assert g.max_dropouts == g.k - g.threshold


@settings(max_examples=60, deadline=None)
@given(
    population=st.integers(1, 300),
    data=st.data(),
)
def test_log_tails_equal_the_exact_sums(population, data):
    marked = data.draw(st.integers(0, population))
    draws = data.draw(st.integers(0, population))
    x = data.draw(st.integers(-1, draws + 1))
    above = float(sum(hypergeom_pmf(j, population, marked, draws) for j in range(x + 1, draws + 1)))
    below = float(sum(hypergeom_pmf(j, population, marked, draws) for j in range(0, max(x, 0))))
    for got, want in (
        (log_tail_above(x, population, marked, draws), above),
        (log_tail_below(x, population, marked, draws), below),
    ):
        assert (want == 0 and got == -math.inf) or math.isclose(math.exp(got), want, rel_tol=1e-9, abs_tol=1e-300)


def _disconnected(n: int, k: int, removed: set[int], ring: list[int]) -> bool:
    """Whether the Harary graph of degree k over ``ring`` minus ``removed`` is disconnected (BFS)."""
    pos = {c: i for i, c in enumerate(ring)}
    alive = [c for c in ring if c not in removed]
    if not alive:
        return False
    seen, todo = {alive[0]}, [alive[0]]
    while todo:
        c = todo.pop()
        for off in range(-(k // 2), k // 2 + 1):
            d = ring[(pos[c] + off) % n]
            if off and d not in removed and d not in seen:
                seen.add(d)
                todo.append(d)
    return len(seen) != len(alive)


def test_disconnection_bound_holds_against_real_graphs():
    """Monte Carlo over random removed sets on a Harary ring: the empirical disconnection rate never
    exceeds the union bound (by more than 4 binomial standard errors), and the bound is not vacuous
    where disconnections happen."""
    rng = np.random.default_rng(0)
    for n, k, removed in ((30, 4, 12), (40, 6, 20), (50, 8, 30)):
        trials, hits = 2000, 0
        for _ in range(trials):
            gone = set(rng.choice(n, size=removed, replace=False).tolist())
            hits += _disconnected(n, k, gone, list(range(n)))
        bound = math.exp(log_disconnect_bound(n, k, removed))
        rate = hits / trials
        assert rate <= bound + 4 * math.sqrt(max(bound, 1e-4) * (1 - min(bound, 1)) / trials) + 1e-9, (
            n,
            k,
            rate,
            bound,
        )
        assert hits > 0  # these settings do disconnect: the check is not trivially passed


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n=100, corrupt=0.1, dropout=0.1, degree=3), "degree must be even"),
        (dict(n=10, corrupt=0.1, dropout=0.1, max_dropouts=50), "max_dropouts 50"),
        (dict(n=100, corrupt=0.1, dropout=0.1, degree=4), "disconnect"),
        (dict(n=100, corrupt=0.45, dropout=0.45), "no SecAgg\\+ graph for 100 clients"),
        (dict(n=2, corrupt=0.0, dropout=0.1), "no SecAgg\\+ graph for 2 clients"),
        (dict(n=1, corrupt=0.0, dropout=0.0), "at least 2 participants"),
        (dict(n=10, corrupt=1.0, dropout=0.0), "corrupt fraction must lie in"),
        (dict(n=10, corrupt=0.0, dropout=-0.1), "dropout fraction must lie in"),
    ],
)
def test_infeasible_settings_are_refused_with_the_reason(kw, match):
    with pytest.raises(ValueError, match=match):
        graph_params(**kw)


def test_explicit_settings_are_checked_against_the_same_conditions():
    g = graph_params(100, 0.1, 0.1)
    assert graph_params(100, 0.1, 0.1, degree=g.k) == g
    assert graph_params(100, 0.1, 0.1, degree=g.k, max_dropouts=g.max_dropouts) == g
    bigger = graph_params(100, 0.1, 0.1, degree=g.k + 10)
    assert conditions(100, bigger.k, bigger.threshold, 0.1, 0.1, 40, 20)
    assert graph_params(100, 0.1, 0.1, degree=500).k == 99  # everyone
    with pytest.raises(ValueError, match="max_dropouts"):
        graph_params(100, 0.1, 0.1, degree=g.k, max_dropouts=g.max_dropouts + 1)  # threshold below the colluders


def test_defaults_at_the_bench_sizes():
    """The default threat model's graphs at 100 and 1000 clients (the cost table of docs/api/privacy.md)
    meet the exact conditions, and no smaller degree does for any threshold."""
    for n in (100, 1000):
        g = graph_params(n, 0.1, 0.1)
        assert conditions(n, g.k, g.threshold, 0.1, 0.1, 40, 20)
        assert not any(conditions(n, g.k - 2, r, 0.1, 0.1, 40, 20) for r in range(1, g.k - 1))
