"""graph_prox against an exact slow solve (SLSQP epigraph form), certificates, and the kNN graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import prox_ref


@pytest.mark.cpu_path("graph_prox is a PyTorch-level solver, no op")
@settings(max_examples=25)
@given(
    n=st.integers(2, 5),
    dim=st.integers(1, 3),
    lam=st.floats(0.0, 3.0),
    p=st.sampled_from([1, 2]),
    seed=st.integers(0, 10_000),
    weighted=st.booleans(),
)
def test_matches_slow_exact_solve(n, dim, lam, p, seed, weighted):
    rng = np.random.default_rng(seed)
    y = rng.normal(0, 2, size=(n, dim))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    keep = [e for e in pairs if rng.random() < 0.7] or pairs[:1]
    edges = np.array(keep)
    w = rng.uniform(0.2, 2.0, size=len(edges)) if weighted else None
    r = fedkernels.graph_prox(
        torch.tensor(y), torch.tensor(edges), lam, p, None if w is None else torch.tensor(w), tol=1e-12
    )
    assert r.converged and r.gap >= -1e-9
    z_slow, _ = prox_ref.graph_prox_slow(y, edges, lam, p, w)
    f_slow = prox_ref.graph_objective(
        z_slow, y, edges, lam, p, w
    )  # its true objective (SLSQP may be slightly infeasible)
    f_fast = prox_ref.graph_objective(r.z.numpy(), y, edges, lam, p, w)
    assert abs(f_fast - r.primal) <= 1e-9 * (1 + abs(f_fast))
    assert f_fast <= f_slow + 1e-7 * (1 + abs(f_slow))  # no worse than the slow solver
    # strong convexity (modulus 1): 0.5||Z - Z*||^2 <= f(Z) - f*, and f* >= f_fast - gap
    gap = max(0.0, r.gap)  # may round to -1e-16
    bound = np.sqrt(2 * gap) + np.sqrt(2 * max(0.0, f_slow - f_fast + gap))
    assert np.linalg.norm(r.z.numpy() - z_slow) <= bound + 1e-6


def test_dual_is_feasible_and_reproduces_z():
    g = torch.Generator().manual_seed(1)
    y = torch.randn(8, 200, generator=g, dtype=torch.float64)
    edges, _ = fedkernels.knn_graph(y, 3, "l2")
    for p in (1, 2):
        r = fedkernels.graph_prox(y, edges, 0.7, p, tol=1e-10)
        assert r.converged
        q = r.dual
        norms = q.abs().amax(1) if p == 1 else torch.linalg.vector_norm(q, dim=1)
        assert (norms <= 0.7 * (1 + 1e-12)).all()
        bt = torch.zeros_like(y)
        bt.index_add_(0, edges[:, 0], q)
        bt.index_add_(0, edges[:, 1], -q)
        assert torch.allclose(r.z, y - bt, atol=1e-12)


def test_huge_lam_fuses_connected_clients_to_the_mean():
    y = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, -1.0], [10.0, 10.0]], dtype=torch.float64)
    edges = torch.tensor([[0, 1], [1, 2]])
    for p in (1, 2):
        r = fedkernels.graph_prox(y, edges, 1e4, p, tol=1e-12, max_iter=100_000)
        assert torch.allclose(r.z[:3], y[:3].mean(0).expand(3, 2), atol=1e-6)
        assert torch.equal(r.z[3], y[3])  # isolated client untouched


def test_lam_zero_and_no_edges():
    y = torch.randn(3, 4, dtype=torch.float64)
    assert torch.equal(fedkernels.graph_prox(y, torch.tensor([[0, 1]]), 0.0).z, y)
    assert torch.equal(fedkernels.graph_prox(y, torch.zeros(0, 2, dtype=torch.int64), 1.0).z, y)


def test_deterministic_across_threads():
    g = torch.Generator().manual_seed(4)
    y = torch.randn(12, 3000, generator=g)
    edges, _ = fedkernels.knn_graph(y, 3)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = fedkernels.graph_prox(y, edges, 0.3, 2, tol=1e-6).z
        torch.set_num_threads(2)
        b = fedkernels.graph_prox(y, edges, 0.3, 2, tol=1e-6).z
    finally:
        torch.set_num_threads(old)
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(y=torch.ones(3)), ValueError, "y must be"),
        (dict(edges=torch.tensor([[0, 3]])), IndexError, "edges"),
        (dict(edges=torch.tensor([[0, 0]])), ValueError, "self loops"),
        (dict(edges=torch.tensor([[0, 1]]).int()), ValueError, "edges must be int64"),
        (dict(lam=-1.0), ValueError, "lam"),
        (dict(p=3), ValueError, "p must be"),
        (dict(weights=torch.tensor([-1.0])), ValueError, "weights"),
        (dict(y=torch.tensor([[float("nan")], [0.0], [1.0]])), ValueError, "y must be finite"),
    ],
)
def test_bad_input(kwargs, exc, match):
    args = dict(y=torch.zeros(3, 1), edges=torch.tensor([[0, 1]]), lam=1.0, p=2)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        fedkernels.graph_prox(args["y"], args["edges"], args["lam"], args["p"], args.get("weights"))


def test_knn_graph_against_brute_force():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(15, 6, generator=g, dtype=torch.float64)
    for metric in ("l2", "cosine"):
        edges, dist = fedkernels.knn_graph(x, 2, metric)
        want = set()
        for i in range(15):
            ds = []
            for j in range(15):
                if i != j:
                    a, b = x[i].numpy(), x[j].numpy()
                    d = np.linalg.norm(a - b) if metric == "l2" else 1 - a @ b / np.linalg.norm(a) / np.linalg.norm(b)
                    ds.append((d, j))
            for _, j in sorted(ds)[:2]:
                want.add((min(i, j), max(i, j)))
        assert set(map(tuple, edges.tolist())) == want
        assert (edges[:, 0] < edges[:, 1]).all() and (dist >= 0).all()


def test_model_and_feature_space_graphs():
    g = torch.Generator().manual_seed(5)
    base = [torch.randn(4, 3, generator=g), torch.randn(3, generator=g)]
    models = [[t + 0.01 * i * torch.randn(t.shape, generator=g) for t in base] for i in range(3)]
    models.append([-t for t in base])
    edges, _ = fedkernels.model_space_graph(models, 1)
    assert [0, 1] in edges.tolist() and not any(3 in e and 0 in e for e in edges.tolist())
    feats = [torch.randn(50, 4, generator=g) * s for s in (1.0, 1.05, 5.0)]
    edges, _ = fedkernels.feature_space_graph(feats, 1)
    assert [0, 1] in edges.tolist()
    with pytest.raises(ValueError, match="k must be"):
        fedkernels.knn_graph(torch.randn(3, 2), 3)
