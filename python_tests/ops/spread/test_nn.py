"""fedkernels.nn spreadout modules: the regulariser module and FedALC-fixed embedding training."""

from __future__ import annotations

import pytest
import torch

import fedkernels
from fedkernels import PairWeights
from fedkernels.nn import SpreadoutRegularizer, learn_fixed_class_embeddings, positive_pull


def _clustered_pair_weights(c: int = 40, group: int = 4) -> PairWeights:
    # classes co-occur within groups of 4 (alpha = 1/2 inside a group), never across groups
    rows, cols = [], []
    for a in range(c):
        for b in range(c):
            if a != b and a // group == b // group:
                rows.append(a)
                cols.append(b)
    return PairWeights.from_pairs(torch.tensor(rows), torch.tensor(cols), torch.full((len(rows),), 0.5), c)


def test_regularizer_is_weighted_loss():
    W = torch.randn(30, 4, requires_grad=True)
    pw = _clustered_pair_weights(30, 3)
    reg = SpreadoutRegularizer(margin=2.0, k=5, pair_weight=pw, weight=0.25)
    assert reg(W).item() == pytest.approx(0.25 * fedkernels.spreadout_loss(W, 2.0, 5, pw).item())


def test_positive_pull_matches_loop():
    pw = _clustered_pair_weights(12, 3)
    W = torch.randn(12, 5, dtype=torch.float64)
    dense = pw.dense()
    want = sum(
        (1 - dense[a, b]) * ((W[a] - W[b]) ** 2).sum()
        for a in range(12)
        for b in range(12)
        if a != b and dense[a, b] != 1
    )
    assert positive_pull(W, pw).item() == pytest.approx(float(want))


def test_fixed_embeddings_separate_groups_and_are_reproducible():
    pw = _clustered_pair_weights()
    a = learn_fixed_class_embeddings(pw, 16, margin=1.0, k=6, steps=150, seed=3)
    b = learn_fixed_class_embeddings(pw, 16, margin=1.0, k=6, steps=150, seed=3)
    assert torch.equal(a, b) and a.shape == (40, 16)
    torch.testing.assert_close(a.norm(dim=1), torch.ones(40))
    d = torch.cdist(a.double(), a.double())
    same = (torch.arange(40)[:, None] // 4 == torch.arange(40)[None, :] // 4) & ~torch.eye(40, dtype=torch.bool)
    other = ~same & ~torch.eye(40, dtype=torch.bool)
    # co-occurring classes end up closer than the others, and the others are mostly beyond the margin
    assert d[same].mean() < 0.5 * d[other].mean()
    assert (d[other] >= 0.9).float().mean() > 0.9


def test_one_class():
    pw = PairWeights.from_pairs(torch.zeros(0), torch.zeros(0), torch.zeros(0), 1)
    W = learn_fixed_class_embeddings(pw, 8)
    assert W.shape == (1, 8)
