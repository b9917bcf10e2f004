"""Ranking metrics against the textbook formulas and a hand-worked example."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedkernels.metrics import ndcg_at_k, precision_at_k
from python_tests.reference import metrics_ref
from python_tests.support.helpers import csr_from_lists


def test_hand_worked():
    # sample 0: labels {1, 4}; predicted [4, 2, 1] -> P@1 = 1, P@3 = 2/3
    # sample 1: labels {};     predicted [0, 1, 2] -> 0
    topk = torch.tensor([[4, 2, 1], [0, 1, 2]])
    indptr, indices = csr_from_lists([[1, 4], []])
    assert precision_at_k(topk, indptr, indices, 1) == pytest.approx(0.5)
    assert precision_at_k(topk, indptr, indices, 3) == pytest.approx((2 / 3) / 2)
    # nDCG@3 of sample 0: (1 + 1/log2(4)) / (1 + 1/log2(3))
    assert ndcg_at_k(topk, indptr, indices, 3) == pytest.approx((1 + 0.5) / (1 + 1 / 1.5849625007211563) / 2)


@given(st.data())
def test_matches_reference(data):
    p = data.draw(st.integers(1, 30))
    n = data.draw(st.integers(1, 10))
    k = data.draw(st.integers(1, p))
    labels = [sorted(set(data.draw(st.lists(st.integers(0, p - 1), max_size=6)))) for _ in range(n)]
    preds = [data.draw(st.permutations(range(p)))[:k] for _ in range(n)]
    indptr, indices = csr_from_lists(labels)
    topk = torch.tensor(preds, dtype=torch.int64)
    ys = [set(x) for x in labels]
    for kk in range(1, k + 1):
        assert precision_at_k(topk, indptr, indices, kk) == pytest.approx(metrics_ref.precision_at_k(preds, ys, kk))
        assert ndcg_at_k(topk, indptr, indices, kk) == pytest.approx(metrics_ref.ndcg_at_k(preds, ys, kk))


def test_bad_k():
    indptr, indices = csr_from_lists([[0]])
    with pytest.raises(ValueError, match="k"):
        precision_at_k(torch.tensor([[0]]), indptr, indices, 2)
