"""PSP@k, the frequent/infrequent split, MAP and communication accounting against slow references
and hand-worked examples."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedkernels.fl.types import RoundRecord
from fedkernels.metrics import (
    communication_summary,
    inverse_propensity,
    map_at_k,
    precision_at_k,
    psp_at_k,
    ranking_metrics,
    split_precision_at_k,
    top1_accuracy,
)
from python_tests.reference import metrics_ref
from python_tests.support.helpers import csr_from_lists


def test_inverse_propensity_hand_worked():
    # N = 100, N_l = 10: C = (ln 100 - 1) * 2.5^0.55; 1/p = 1 + C * 11.5^-0.55
    c = (math.log(100) - 1) * 2.5**0.55
    got = inverse_propensity(torch.tensor([10, 0]), 100)
    assert got[0].item() == pytest.approx(1 + c * 11.5**-0.55, rel=1e-12)
    assert got[1].item() == pytest.approx(1 + c * 1.5**-0.55, rel=1e-12)
    assert got[1] > got[0]  # rarer labels weigh more


def test_psp_hand_worked():
    # labels {0, 1}, weights 1/p = [1, 3, 5]; prediction [2, 1]: PSP@2 = (0 + 3) / 2 = 1.5;
    # best top-2 of the labels = (3 + 1) / 2 = 2 -> normalised 0.75.
    topk = torch.tensor([[2, 1]])
    indptr, indices = csr_from_lists([[0, 1]])
    w = torch.tensor([1.0, 3.0, 5.0], dtype=torch.float64)
    assert psp_at_k(topk, indptr, indices, w, 2, normalize=False) == pytest.approx(1.5)
    assert psp_at_k(topk, indptr, indices, w, 2) == pytest.approx(0.75)


def test_split_and_map_hand_worked():
    # labels {1, 4}; predicted [4, 2, 1]; frequent = {4}
    topk = torch.tensor([[4, 2, 1]])
    indptr, indices = csr_from_lists([[1, 4]])
    f, i = split_precision_at_k(topk, indptr, indices, torch.tensor([4]), 3)
    assert (f, i) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    # AP@3 = (1/1 + 2/3) / 2
    assert map_at_k(topk, indptr, indices, 3) == pytest.approx((1 + 2 / 3) / 2)
    assert top1_accuracy(topk, indptr, indices) == 1.0


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
    n_train = data.draw(st.integers(3, 10**6))
    frequent = data.draw(st.sets(st.integers(0, p - 1)))
    indptr, indices = csr_from_lists(labels)
    topk = torch.tensor(preds, dtype=torch.int64)
    ys = [set(x) for x in labels]
    inv_p = inverse_propensity(torch.tensor(counts), n_train)
    inv_ref = metrics_ref.inverse_propensity(counts, n_train)
    assert inv_p.tolist() == pytest.approx(inv_ref, rel=1e-12)
    for kk in range(1, k + 1):
        for norm in (False, True):
            assert psp_at_k(topk, indptr, indices, inv_p, kk, norm) == pytest.approx(
                metrics_ref.psp_at_k(preds, ys, inv_ref, kk, norm), rel=1e-9, abs=1e-12
            )
        f, i = split_precision_at_k(topk, indptr, indices, torch.tensor(sorted(frequent), dtype=torch.int64), kk)
        rf, ri = metrics_ref.split_precision_at_k(preds, ys, frequent, kk)
        assert (f, i) == (pytest.approx(rf), pytest.approx(ri))
        assert f + i == pytest.approx(precision_at_k(topk, indptr, indices, kk))
        assert map_at_k(topk, indptr, indices, kk) == pytest.approx(metrics_ref.map_at_k(preds, ys, kk))


def test_ranking_metrics_keys():
    topk = torch.tensor([[0, 1, 2, 3, 4]])
    indptr, indices = csr_from_lists([[0, 3]])
    out = ranking_metrics(topk, indptr, indices, (1, 3, 5), inv_propensity=torch.ones(5), frequent=torch.tensor([0]))
    assert {"P@1", "PSP@3", "P@5_freq", "P@5_infreq", "MAP@5"} <= set(out)
    assert out["PSP@1"] == 1.0 and out["P@1_freq"] == 1.0 and out["P@1_infreq"] == 0.0


def test_empty_and_bad_input():
    empty = torch.zeros(0, 3, dtype=torch.int64)
    ip = torch.zeros(1, dtype=torch.int64)
    ix = torch.zeros(0, dtype=torch.int64)
    assert psp_at_k(empty, ip, ix, torch.ones(3), 2) == 0.0 and map_at_k(empty, ip, ix, 3) == 0.0
    indptr, indices = csr_from_lists([[0]])
    with pytest.raises(ValueError, match="k must"):
        map_at_k(torch.tensor([[0]]), indptr, indices, 2)
    with pytest.raises(ValueError, match="inv_propensity"):
        psp_at_k(torch.tensor([[5]]), indptr, indices, torch.ones(3), 1)
    with pytest.raises(ValueError, match="num_samples"):
        inverse_propensity(torch.ones(3), 0)


def _rec(r, up, down, p1=None):
    rec = RoundRecord(r, [0], [], down, up)
    if p1 is not None:
        rec.metrics = {"P@1": p1}
    return rec


def test_communication_summary_hand_worked():
    hist = [_rec(0, 10, 100, 0.2), _rec(1, 10, 100), _rec(2, 20, 100, 0.5), _rec(3, 10, 100, 0.5)]
    s = communication_summary(hist, "P@1", model_bytes=77, target=0.4)
    assert s["total_up"] == 50 and s["total_down"] == 400
    assert [r["cum_up"] for r in s["per_round"]] == [10, 20, 40, 50]
    # best 0.5 first reached after 3 rounds, with 40 up + 300 down bytes; ties keep the first
    assert (s["best"], s["rounds_to_best"], s["bytes_to_best"]) == (0.5, 3, 340)
    assert (s["rounds_to_target"], s["bytes_to_target"]) == (3, 340)
    assert s["model_bytes"] == 77
    assert communication_summary(hist, target=0.9)["rounds_to_target"] is None
    assert communication_summary([])["best"] is None
