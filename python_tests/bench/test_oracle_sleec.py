"""bench/fl/oracle_sleec.py: each step of the SLEEC-style reference against a slow, obvious version."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from python_tests.support.paths import ROOT
from python_tests.support.scripts import load_script

ors = load_script(ROOT / "bench" / "fl" / "oracle_sleec.py")


def _slow_neighbours(query, base, k, exclude_self):
    out = []
    for i, q in enumerate(query):
        cand = [(-float(np.dot(q.astype(np.float64), b.astype(np.float64))), j) for j, b in enumerate(base)]
        cand = [c for c in cand if not (exclude_self and c[1] == i)]
        out.append([j for _, j in sorted(cand)[:k]])
    return np.array(out, dtype=np.int64).reshape(len(query), k)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000), n=st.integers(2, 9), m=st.integers(1, 5), k=st.integers(1, 3), block=st.integers(1, 4)
)
def test_neighbours_match_the_loop(seed, n, m, k, block):
    rng = np.random.default_rng(seed)
    base = rng.integers(-1, 2, size=(n, 3)).astype(np.float32)  # small integers: exact ties are common
    query = rng.integers(-1, 2, size=(m, 3)).astype(np.float32)
    k = min(k, n - 1)
    got = ors._top_neighbours(query, base, k, block, exclude_self=False)
    np.testing.assert_array_equal(got, _slow_neighbours(query, base, k, False))
    got_self = ors._top_neighbours(base, base, k, block, exclude_self=True)
    np.testing.assert_array_equal(got_self, _slow_neighbours(base, base, k, True))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), m=st.integers(1, 4), n=st.integers(1, 6), p=st.integers(1, 6), k=st.integers(1, 6))
def test_vote_matches_the_loop(seed, m, n, p, k):
    rng = np.random.default_rng(seed)
    y = (rng.random((n, p)) < 0.4).astype(np.float32)
    nb = rng.integers(0, n, size=(m, min(3, n)))
    k = min(k, p)
    got = ors.vote_topk(nb, y, k)
    for i in range(m):
        votes = [sum(float(y[j, c]) for j in nb[i]) for c in range(p)]
        want = sorted(range(p), key=lambda c: (-votes[c], c))[:k]  # most votes, ties to the smaller id
        assert got[i].tolist() == want


def test_label_graph_is_the_kept_cosines():
    rng = np.random.default_rng(0)
    y = (rng.random((12, 7)) < 0.35).astype(np.float32)
    y[3] = 0  # a point without labels: every cosine with it is 0
    g = ors.label_graph(y, 3, block=5).toarray()
    norm = np.linalg.norm(y, axis=1)
    cos = (y @ y.T) / np.outer(np.where(norm > 0, norm, 1), np.where(norm > 0, norm, 1))
    keep = np.zeros_like(cos, dtype=bool)
    nb = _slow_neighbours(ors._normalize(y), ors._normalize(y), 3, True)
    for i in range(12):
        keep[i, nb[i]] = True
    keep |= keep.T
    np.testing.assert_allclose(g, np.where(keep, cos, 0.0), atol=1e-6)


def test_embedding_is_the_best_rank_d_psd_part():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(20, 20))
    g = sp.csr_matrix((a + a.T) / 2)
    z = ors.embed_labels(g, 4)
    vals, vecs = np.linalg.eigh(g.toarray())
    top = np.argsort(-vals)[:4]
    want = (vecs[:, top] * np.maximum(vals[top], 0)) @ vecs[:, top].T
    np.testing.assert_allclose(z.astype(np.float64) @ z.T, want, atol=1e-4)


def test_ridge_is_the_regularised_least_squares_solution():
    rng = np.random.default_rng(2)
    x, z = rng.normal(size=(15, 4)).astype(np.float32), rng.normal(size=(15, 3)).astype(np.float32)
    v = ors.fit_ridge(x, z, 0.7)
    # the augmented least-squares problem [X; sqrt(r) I] V = [Z; 0]
    xa = np.vstack([x.astype(np.float64), np.sqrt(0.7) * np.eye(4)])
    za = np.vstack([z.astype(np.float64), np.zeros((4, 3))])
    np.testing.assert_allclose(v, np.linalg.lstsq(xa, za, rcond=None)[0], rtol=1e-4, atol=1e-5)


def test_separable_data_is_classified_exactly():
    # class c lives on feature block c; every point has its class and, half the time, class c + 1
    rng = np.random.default_rng(3)
    n, p, per = 60, 6, 4
    cls = np.arange(n) % p
    x = np.zeros((n, p * per), dtype=np.float32)
    for i, c in enumerate(cls):
        x[i, c * per : (c + 1) * per] = 1 + 0.1 * rng.random(per)
    y = np.zeros((n, p), dtype=np.float32)
    y[np.arange(n), cls] = 1
    cfg = ors.SleecConfig(dim=6, label_neighbours=5, k=5, ridge=0.01)
    top = ors.sleec_topk(x[:48], y[:48], x[48:], cfg, k=1)
    assert top[:, 0].tolist() == cls[48:].tolist()
    assert ors.feature_knn_topk(x[:48], y[:48], x[48:], cfg, k=1)[:, 0].tolist() == cls[48:].tolist()


def test_selection_never_sees_the_test_rows(monkeypatch):
    seen = []

    def fake_sleec(x_tr, y_tr, x_q, cfg, k=5):
        seen.append(x_q.shape[0])
        return torch.zeros(x_q.shape[0], k, dtype=torch.int64)

    monkeypatch.setattr(ors, "sleec_topk", fake_sleec)
    x, y = np.zeros((50, 3), np.float32), np.eye(50, 4, dtype=np.float32)
    cfg, table = ors.select_config(x, y, ors.SleecConfig(), seed=0)
    assert seen == [10] * len(table)  # the 20% validation rows of the 50 training rows only
    assert cfg == ors.SleecConfig(dim=50, ridge=0.1, label_neighbours=15)  # all tie: the first grid point


@pytest.mark.parametrize("bad", [0, -1])
def test_k_must_be_positive(bad):
    with pytest.raises(ValueError):
        ors.SleecConfig(k=bad)
