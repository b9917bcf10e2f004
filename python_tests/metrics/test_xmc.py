"""The Extreme Classification Repository's metrics (R@k, PSnDCG@k, per-dataset propensities, filter
files) against hand-worked cases and the per-sample reference of the published formulas."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedkernels.metrics import (
    PROPENSITY,
    filter_predictions,
    inverse_propensity,
    ndcg_at_k,
    precision_at_k,
    propensity_params,
    psndcg_at_k,
    psp_at_k,
    ranking_metrics,
    recall_at_k,
)
from python_tests.reference import metrics_ref
from python_tests.support.helpers import csr_from_lists

pytestmark = pytest.mark.cpu_path("metrics run no op")

# Hand-worked case: labels y0 = {1, 2}, y1 = {0}, y2 = {} (no labels); inverse propensities
# w = [2, 4, 1, 3]; predictions [2, 3], [3, 0], [1, 0].
LABELS = [[1, 2], [0], []]
PREDS = [[2, 3], [3, 0], [1, 0]]
W = torch.tensor([2.0, 4.0, 1.0, 3.0], dtype=torch.float64)
L3 = math.log2(3)  # log2(1 + 2): the rank-2 discount is 1 / L3


def _case():
    indptr, indices = csr_from_lists(LABELS)
    return torch.tensor(PREDS), indptr, indices


def test_hand_worked_case():
    topk, indptr, indices = _case()
    # P@1 = (1 + 0 + 0) / 3; P@2 = (1/2 + 1/2 + 0) / 3
    assert precision_at_k(topk, indptr, indices, 1) == pytest.approx(1 / 3)
    assert precision_at_k(topk, indptr, indices, 2) == pytest.approx(1 / 3)
    # R@1 = (1/2 + 0 + 0) / 3; R@2 = (1/2 + 1/1 + 0) / 3 (a sample without labels counts 0)
    assert recall_at_k(topk, indptr, indices, 1) == pytest.approx(1 / 6)
    assert recall_at_k(topk, indptr, indices, 2) == pytest.approx(1 / 2)
    # nDCG@2: y0 hit at rank 1 over IDCG(2) = 1 + 1/L3; y1 hit at rank 2 over IDCG(1) = 1
    assert ndcg_at_k(topk, indptr, indices, 2) == pytest.approx((1 / (1 + 1 / L3) + 1 / L3) / 3)
    # PSP@1: gained (w[2] + 0 + 0) / 3 = 1/3; best (max w of y0 = 4, of y1 = 2) / 3 = 2 -> 1/6
    assert psp_at_k(topk, indptr, indices, W, 1, normalize=False) == pytest.approx(1 / 3)
    assert psp_at_k(topk, indptr, indices, W, 1) == pytest.approx(1 / 6)
    # PSP@2: gained (1 + 2 + 0) / 6; best (4 + 1 + 2) / 6 -> 3/7
    assert psp_at_k(topk, indptr, indices, W, 2) == pytest.approx(3 / 7)
    # PSnDCG@2: y0 (w[2] = 1 at rank 1) / (1 + 1/L3); y1 (w[0] = 2 at rank 2: 2/L3) / 1; y2 0.
    got = (1 / (1 + 1 / L3) + 2 / L3) / 3
    # best: y0 ranks its labels 1 (w 4), 2 (w 1): (4 + 1/L3) / (1 + 1/L3); y1: 2 / 1
    best = ((4 + 1 / L3) / (1 + 1 / L3) + 2) / 3
    assert psndcg_at_k(topk, indptr, indices, W, 2, normalize=False) == pytest.approx(got)
    assert psndcg_at_k(topk, indptr, indices, W, 2) == pytest.approx(got / best)
    out = ranking_metrics(topk, indptr, indices, (1, 2), inv_propensity=W)
    assert {"P@1", "nDCG@2", "R@2", "PSP@2", "PSnDCG@1", "PSnDCG@2"} <= set(out)
    assert out["PSnDCG@2"] == pytest.approx(got / best) and out["R@2"] == pytest.approx(1 / 2)


def test_perfect_ranking_scores_one():
    indptr, indices = csr_from_lists([[0, 3], [2]])
    w = torch.tensor([1.0, 5.0, 2.0, 4.0], dtype=torch.float64)
    topk = torch.tensor([[3, 0], [2, 1]])  # each sample's labels by descending w
    assert psp_at_k(topk, indptr, indices, w, 2) == pytest.approx(1.0)
    assert psndcg_at_k(topk, indptr, indices, w, 2) == pytest.approx(1.0)
    assert psndcg_at_k(topk, indptr, indices, w, 1) == pytest.approx(1.0)


labels_and_preds = st.integers(1, 25).flatmap(
    lambda p: st.tuples(
        st.just(p),
        st.integers(1, p),
        st.lists(st.lists(st.integers(0, p - 1), max_size=6, unique=True), min_size=1, max_size=8),
    )
)


@given(labels_and_preds, st.data())
def test_matches_reference(lp, data):
    p, k, labels = lp
    preds = [data.draw(st.permutations(range(p)))[:k] for _ in labels]
    counts = data.draw(st.lists(st.integers(0, 1000), min_size=p, max_size=p))
    a, b = data.draw(st.sampled_from([(0.55, 1.5), (0.6, 2.6), (0.5, 0.4)]))
    n_train = data.draw(st.integers(3, 10**6))
    indptr, indices = csr_from_lists(labels)
    topk = torch.tensor(preds, dtype=torch.int64)
    ys = [set(x) for x in labels]
    inv_p = inverse_propensity(torch.tensor(counts), n_train, a, b)
    assert inv_p.tolist() == pytest.approx(metrics_ref.inverse_propensity(counts, n_train, a, b), rel=1e-12)
    w = inv_p.tolist()
    for kk in sorted({1, (k + 1) // 2, k}):
        assert recall_at_k(topk, indptr, indices, kk) == pytest.approx(metrics_ref.recall_at_k(preds, ys, kk))
        for norm in (False, True):
            got = psndcg_at_k(topk, indptr, indices, inv_p, kk, normalize=norm)
            assert got == pytest.approx(metrics_ref.psndcg_at_k(preds, ys, w, kk, norm), rel=1e-9, abs=1e-12)


@given(labels_and_preds, st.data())
def test_filter_predictions_matches_reference(lp, data):
    p, k, labels = lp
    preds = [data.draw(st.permutations(range(p)))[:k] for _ in labels]
    filters = [data.draw(st.sets(st.integers(0, p - 1), max_size=3)) for _ in labels]
    keep = data.draw(st.integers(0, k))
    fp, fi = csr_from_lists([sorted(f) for f in filters])
    got = filter_predictions(torch.tensor(preds, dtype=torch.int64), fp, fi, keep)
    assert got.tolist() == metrics_ref.filter_predictions(preds, filters, keep)
    # scoring the filtered list: a filtered (-1) slot is never a hit
    indptr, indices = csr_from_lists(labels)
    if keep > 0:
        ys = [set(x) for x in labels]
        want = metrics_ref.precision_at_k(got.tolist(), ys, keep)
        assert precision_at_k(got, indptr, indices, keep) == pytest.approx(want)


def test_filter_hand_worked():
    # row 0 filters its own id 5 (the reciprocal pair), row 1 nothing
    topk = torch.tensor([[5, 2, 7], [1, 5, 3]])
    fp, fi = csr_from_lists([[5], []])
    assert filter_predictions(topk, fp, fi, 2).tolist() == [[2, 7], [1, 5]]
    fp, fi = csr_from_lists([[5, 2, 7], []])
    assert filter_predictions(topk, fp, fi, 2).tolist() == [[-1, -1], [1, 5]]
    with pytest.raises(ValueError, match="k must"):
        filter_predictions(topk, fp, fi, 4)
    with pytest.raises(ValueError, match="indptr"):
        filter_predictions(topk, torch.tensor([0, 1]), torch.tensor([5]), 2)


def test_propensity_table():
    assert propensity_params("Amazon-670K") == (0.6, 2.6)
    assert propensity_params("LF-AmazonTitles-131K") == (0.6, 2.6)
    assert propensity_params("wikilshtc-325k") == (0.5, 0.4)
    assert propensity_params("LF-WikiSeeAlsoTitles-320K") == (0.5, 0.4)
    assert propensity_params("EURLex-4K") == (0.55, 1.5)
    assert propensity_params("/data/cache/Wiki10-31K/") == (0.55, 1.5)  # a path's last part
    assert propensity_params("synthetic") == propensity_params(None) == (0.55, 1.5)
    assert all(src for _, _, src in PROPENSITY.values()), "every table row names its source"
    # Jain et al.'s formula with Amazon's A, B: N = 1000, N_l = 7
    c = (math.log(1000) - 1) * 3.6**0.6
    assert inverse_propensity(torch.tensor([7]), 1000, 0.6, 2.6)[0].item() == pytest.approx(1 + c * 9.6**-0.6)


def test_bad_predictions():
    indptr, indices = csr_from_lists([[0]])
    with pytest.raises(ValueError, match="topk ids"):
        recall_at_k(torch.tensor([[-2]]), indptr, indices, 1)
    with pytest.raises(ValueError, match="inv_propensity"):
        psndcg_at_k(torch.tensor([[9]]), indptr, indices, torch.ones(3), 1)
    with pytest.raises(ValueError, match="k must"):
        psndcg_at_k(torch.tensor([[0]]), indptr, indices, torch.ones(3), 2)
