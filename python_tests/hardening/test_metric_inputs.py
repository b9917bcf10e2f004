"""Metrics and propensities that cannot be fooled (issue "The third hostile sweep", items 4 and 5): a
label id of -1 or a predicted id near 2**62 gave false hits in P@k, and ``--propensity A B`` with
B <= 0 made PSP@k and PSnDCG@k 0.0 or NaN. Each is now a ValueError naming the argument or flag."""

from __future__ import annotations

import math

import pytest
import torch

from fedkernels.metrics import (
    MAX_INV_PROPENSITY,
    check_propensity,
    filter_predictions,
    inverse_propensity,
    map_at_r,
    precision_at_k,
    psndcg_at_k,
    psp_at_k,
    ranking_metrics,
)
from fedkernels_cli import main
from python_tests.support.helpers import csr_from_lists


def test_a_label_id_of_minus_one_is_refused_not_a_false_hit():
    # row 1's label -1 keyed as row 1 * p - 1 = row 0's prediction p - 1: P@1 came out 0.5
    topk = torch.tensor([[3], [0]])
    indptr, indices = torch.tensor([0, 0, 1]), torch.tensor([-1])
    with pytest.raises(ValueError, match="indices must hold label ids >= 0, got -1"):
        precision_at_k(topk, indptr, indices, 1)


def test_a_predicted_id_near_2pow62_is_refused_not_a_false_hit():
    # row 4's key 4 * (2**62 + 1) + 1 wrapped to 5, row 0's prediction 5: P@1 came out 0.2
    topk = torch.tensor([[5], [0], [0], [0], [2**62]])
    indptr, indices = csr_from_lists([[], [], [], [], [1]])
    with pytest.raises(ValueError, match=r"topk holds class id 4611686018427387904: with 5 samples"):
        precision_at_k(topk, indptr, indices, 1)
    with pytest.raises(ValueError, match="topk holds class id"):
        ranking_metrics(topk, indptr, indices, (1,))


@pytest.mark.parametrize(
    "indptr, indices, match",
    [
        ([1, 1, 2], [0, 1], r"indptr\[0\] must be 0"),
        ([0, 2, 1], [0, 1], "never decrease"),
        ([0, 1, 5], [0, 1], r"indptr\[-1\] must equal"),
        ([0, 1, 2], [0, -(2**63)], "label ids >= 0"),
    ],
)
def test_malformed_label_csr_is_refused(indptr, indices, match):
    topk = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match=match):
        precision_at_k(topk, torch.tensor(indptr), torch.tensor(indices), 1)
    with pytest.raises(ValueError, match=match):
        filter_predictions(topk, torch.tensor(indptr), torch.tensor(indices), 1)


def test_topk_below_minus_one_is_refused():
    with pytest.raises(ValueError, match="topk ids must be >= 0"):
        precision_at_k(torch.tensor([[-2]]), torch.tensor([0, 1]), torch.tensor([0]), 1)


def test_large_but_comparable_ids_still_score():
    # ids far beyond any label space but below the bound: a miss is a miss, a hit a hit
    big = 2**40
    topk = torch.tensor([[big, 3], [7, big + 1]])
    indptr, indices = csr_from_lists([[3], [big + 1]])
    assert precision_at_k(topk, indptr, indices, 2) == pytest.approx(0.5)


def test_map_at_r_takes_huge_label_ids_without_a_dense_matrix():
    # labels 2**40 and 2**40 + 1 made map_at_r allocate N x 2**40; now columns are the distinct labels
    emb = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    indptr, indices = csr_from_lists([[2**40], [2**40], [2**40 + 1]])
    small_ptr, small_idx = csr_from_lists([[0], [0], [1]])
    assert map_at_r(emb, indptr, indices) == map_at_r(emb, small_ptr, small_idx) == 1.0
    with pytest.raises(ValueError, match="label ids >= 0"):
        map_at_r(emb, indptr, torch.tensor([0, -1, 1]))


# ---- propensities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, match",
    [
        (0.55, 0.0, "finite numbers > 0"),
        (0.55, -1.5, "finite numbers > 0"),
        (0.55, -1.0, "finite numbers > 0"),
        (0.0, 1.5, "finite numbers > 0"),
        (math.nan, 1.5, "finite numbers > 0"),
        (0.55, math.inf, "finite numbers > 0"),
        (True, 1.5, "finite numbers > 0"),
        (2000.0, 1e-9, "propensity-scored metrics would overflow"),
    ],
)
def test_propensity_outside_the_model_is_refused(a, b, match):
    with pytest.raises(ValueError, match=match):
        check_propensity(a, b)
    with pytest.raises(ValueError, match=match):
        inverse_propensity(torch.tensor([0, 3, 10]), 100, a, b)


def test_accepted_propensities_give_weights_the_metrics_take():
    for a, b in ((0.55, 1.5), (0.6, 2.6), (0.5, 0.4), (5.0, 1e-6), (2000.0, 2.0**64)):
        check_propensity(a, b)
        w = inverse_propensity(torch.tensor([0.0, 1.0, 1e6]), 2**40, a, b)
        assert bool(torch.isfinite(w).all()) and float(w.max()) <= MAX_INV_PROPENSITY


def test_a_huge_accepted_b_weighs_as_the_formula_says_not_an_overflow():
    """The fuzzer's find: A = 2000, B = 2**64 passes the model check ((B + 1)^A / B^A stays bounded),
    but (B + 1)^A alone overflowed a float. The weights are the formula's, taken in exact arithmetic."""
    from fractions import Fraction

    a, b, n = 2000.0, 2.0**64, 100
    w = inverse_propensity(torch.tensor([0.0, 5.0]), n, a, b)
    for count, got in zip((0, 5), w.tolist(), strict=True):
        ratio = (Fraction(b) + 1) / (Fraction(b) + count)  # (B + 1)^A / (N_l + B)^A = ratio^A
        want = 1.0 + (math.log(n) - 1.0) * math.exp(a * math.log(ratio))
        assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0])
def test_metrics_refuse_inverse_propensities_that_are_not_positive_numbers(bad):
    topk = torch.tensor([[0, 1]])
    indptr, indices = torch.tensor([0, 1]), torch.tensor([0])
    w = torch.tensor([2.0, bad])
    for metric in (psp_at_k, psndcg_at_k):
        with pytest.raises(ValueError, match="inv_propensity must hold numbers in"):
            metric(topk, indptr, indices, w, 2)


@pytest.mark.parametrize("b", ["0", "-1.5", "-1", "nan"])
def test_cli_propensity_flag_with_b_not_positive_stops_before_any_data(tmp_path, capsys, b, monkeypatch):
    from fedkernels.experiments import experiment

    def refuse(cfg):
        raise AssertionError("the run read its data before refusing --propensity")

    monkeypatch.setattr(experiment, "prepare_data", refuse)
    code = main(["run", "--propensity", "0.55", b, "--output", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "propensity (--propensity A B)" in err and "Traceback" not in err, err
