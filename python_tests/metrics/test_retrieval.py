"""Retrieval MAP@k with a fixed cutoff (the FedSS paper's MAP@10) and MAP@R from one ranking, against
the loops of reference/fl_ref.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fedkernels.metrics import map_at_r, retrieval_map, retrieval_map_at_k
from python_tests.reference import fl_ref


def _data(n: int, d: int, seed: int, num_labels: int = 5):
    rng = np.random.default_rng(seed)
    emb = rng.normal(size=(n, d))
    emb[0] = emb[-1]  # a tie
    labels = [set(rng.choice(num_labels, size=rng.integers(0, 3), replace=False).tolist()) for _ in range(n)]
    indptr = torch.tensor(np.cumsum([0] + [len(s) for s in labels]))
    indices = torch.tensor([v for s in labels for v in sorted(s)], dtype=torch.int64)
    return emb, labels, indptr, indices


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 14), d=st.integers(1, 4), k=st.integers(1, 16), seed=st.integers(0, 10_000))
@example(n=5, d=4, k=2, seed=1)
def test_retrieval_map_at_k_matches_the_definition(n, d, k, seed):
    emb, labels, indptr, indices = _data(n, d, seed)
    got = retrieval_map_at_k(torch.tensor(emb), indptr, indices, k, block=3)
    assert got == pytest.approx(fl_ref.retrieval_map_at_k(emb, labels, k), abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 14), d=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_one_ranking_gives_map_at_r_and_every_cutoff(n, d, seed):
    emb, labels, indptr, indices = _data(n, d, seed)
    got = retrieval_map(torch.tensor(emb), indptr, indices, (1, 10), block=4)
    assert list(got) == ["MAP@R", "MAP@1", "MAP@10"]
    assert got["MAP@R"] == map_at_r(torch.tensor(emb), indptr, indices, block=4)  # the same sums
    assert got["MAP@R"] == pytest.approx(fl_ref.map_at_r(emb, labels), abs=1e-12)
    for k in (1, 10):
        assert got[f"MAP@{k}"] == pytest.approx(fl_ref.retrieval_map_at_k(emb, labels, k), abs=1e-12)


def test_fixed_cutoff_against_map_at_r_by_hand():
    # samples 0-2 share label 0, sample 3 (label 1) has no relevant other and is not a query.
    # Rankings by cosine: 0 -> 1, 3, 2; 1 -> 0, 3, 2; 2 -> 3, 1, 0. Each query has R = 2.
    emb = torch.tensor([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0], [0.9, 0.44]])
    indptr, indices = torch.tensor([0, 1, 2, 3, 4]), torch.tensor([0, 0, 0, 1])
    got = retrieval_map(emb, indptr, indices, (3,))
    at_r = [1 / 2, 1 / 2, (1 / 2) / 2]  # hits within the top R = 2, over R
    at_3 = [(1 + 2 / 3) / 2, (1 + 2 / 3) / 2, (1 / 2 + 2 / 3) / 2]  # hits within the top 3, over min(3, R)
    assert got["MAP@R"] == pytest.approx(sum(at_r) / 3)
    assert got["MAP@3"] == pytest.approx(sum(at_3) / 3)


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_cutoff(k):
    emb, _, indptr, indices = _data(4, 2, 0)
    with pytest.raises(ValueError, match="k"):
        retrieval_map_at_k(torch.tensor(emb), indptr, indices, k)


def test_fewer_than_two_samples_score_zero():
    assert retrieval_map(torch.ones(1, 3), torch.tensor([0, 1]), torch.tensor([0]), (10,)) == {
        "MAP@R": 0.0,
        "MAP@10": 0.0,
    }
