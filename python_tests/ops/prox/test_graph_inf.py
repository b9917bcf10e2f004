"""graph_prox with p = inf (an l1-ball dual projection) and the kernel client graph, against slow references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.solvers import graph_prox, kernel_graph, knn_graph, project_l1_ball
from python_tests.reference import fl_ref, prox_ref


@pytest.mark.cpu_path("a PyTorch-level solver, no op")
@settings(max_examples=20)
@given(rows=st.integers(1, 4), dim=st.integers(1, 6), radius=st.floats(0.0, 3.0), seed=st.integers(0, 10_000))
def test_l1_ball_projection_matches_bisection(rows, dim, radius, seed):
    v = np.random.default_rng(seed).normal(0, 2, size=(rows, dim))
    v[0, 0] = v[0, -1]  # a tie
    got = project_l1_ball(torch.tensor(v), torch.full((rows,), radius, dtype=torch.float64)).numpy()
    for r in range(rows):
        np.testing.assert_allclose(got[r], fl_ref.project_l1_ball(v[r], radius), atol=1e-9)


@pytest.mark.cpu_path("a PyTorch-level solver, no op")
@settings(max_examples=10)
@given(n=st.integers(2, 4), dim=st.integers(1, 3), lam=st.floats(0.05, 2.0), seed=st.integers(0, 10_000))
def test_p_inf_matches_slow_exact_solve(n, dim, lam, seed):
    rng = np.random.default_rng(seed)
    y = rng.normal(0, 2, size=(n, dim))
    edges = np.array([(i, j) for i in range(n) for j in range(i + 1, n)])
    w = rng.uniform(0.3, 2.0, size=len(edges))
    r = graph_prox(torch.tensor(y), torch.tensor(edges), lam, float("inf"), torch.tensor(w), tol=1e-12)
    assert r.converged
    slow = fl_ref.graph_prox_inf_slow(y, edges, lam, w)
    f_fast = prox_ref.graph_objective(r.z.numpy(), y, edges, lam, np.inf, w)
    f_slow = prox_ref.graph_objective(slow, y, edges, lam, np.inf, w)
    assert f_fast <= f_slow + 1e-7  # the certified solution is at least as good as SLSQP's
    np.testing.assert_allclose(r.z.numpy(), slow, atol=1e-4)


def test_p_inf_two_nodes_closed_form():
    # two nodes: the difference is the prox of 2 lam ||.||_inf, d - proj_{l1 ball of 2 lam}(d) (Moreau)
    y = np.array([[3.0, -1.0, 0.5], [0.0, 1.0, 0.2]])
    lam = 0.7
    r = graph_prox(torch.tensor(y), torch.tensor([[0, 1]]), lam, float("inf"), tol=1e-13)
    d = y[0] - y[1]
    want = d - fl_ref.project_l1_ball(d, 2 * lam)
    np.testing.assert_allclose((r.z[0] - r.z[1]).numpy(), want, atol=1e-8)
    np.testing.assert_allclose((r.z[0] + r.z[1]).numpy(), y[0] + y[1], atol=1e-8)


def test_kernel_graph_weights():
    g = torch.Generator().manual_seed(0)
    feats = [torch.randn(5, 3, generator=g) + shift for shift in (0.0, 0.1, 5.0)]
    edges, w = kernel_graph(feats, 1)
    means = torch.stack([f.double().mean(0) for f in feats])
    want_edges, dist = knn_graph(means, 1, "l2")
    assert torch.equal(edges, want_edges)
    sigma = float(dist.median())
    torch.testing.assert_close(w, torch.exp(-(dist**2) / (2 * sigma**2)))
    assert float(w.min()) > 0 and float(w.max()) <= 1
    with pytest.raises(ValueError, match="bandwidth"):
        kernel_graph(feats, 1, bandwidth=0.0)


def test_bad_p():
    with pytest.raises(ValueError, match="p must be 1, 2 or inf"):
        graph_prox(torch.zeros(2, 1), torch.tensor([[0, 1]]), 1.0, 3)
