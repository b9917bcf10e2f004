"""bucket_merge_topk's CPU threshold passes (per-table cutoffs from a strided sample of B / 512 values,
a Fagin-style first pass, a pruned table-0 scan for the rest) against sort of the reference scores.

B >= 1024 makes the cutoff sample strided; "levels" scores (a few buckets at 0, most at -1 or -2) make
the first pass end without a decision, so the second pass runs with heavy ties at the k-th value.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import sketch_ref
from python_tests.support.sketch_strategies import assert_same, with_threads

DISTS = ("peaked", "flat", "levels")


def scores(dist: str, shape: tuple[int, ...], seed: int, dtype: torch.dtype) -> torch.Tensor:
    """peaked: logsigmoid(2 z - 1); flat: log_softmax(z) over B; levels: 0 w.p. 3%, else -1 or -2."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(shape, generator=g, dtype=torch.float64)
    if dist == "peaked":
        x = F.logsigmoid(2 * z - 1)
    elif dist == "flat":
        x = F.log_softmax(z, dim=-1)
    else:
        u = torch.rand(shape, generator=g, dtype=torch.float64)
        x = torch.where(u < 0.03, 0.0, torch.where(u < 0.5, -1.0, -2.0))
    return x.to(dtype)


def check(logp: torch.Tensor, table: torch.Tensor, k: int) -> None:
    values, indices = fedkernels.bucket_merge_topk(logp, table, k)
    want_v, want_i = sketch_ref.bucket_merge_topk(logp, table, k, "mean")
    assert_same(values, want_v)
    assert torch.equal(indices, want_i)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    dist=st.sampled_from(DISTS),
    b=st.sampled_from([7, 40, 300, 1100, 2100]),
    r=st.integers(1, 5),
    n=st.integers(1, 3),
    k=st.integers(1, 40),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64]),
)
def test_distributions_match_reference(seed, dist, b, r, n, k, dtype):
    p = 4000
    check(scores(dist, (r, n, b), seed, dtype), HashFamily(r, b, seed).table(p), k)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), r=st.integers(1, 4), b=st.sampled_from([5, 64, 1100]), value=st.floats(-5, 0))
def test_constant_scores_every_class_ties(seed, r, b, value):
    # every class has the same score: the top k are classes 0..k-1 (every class ties at the k-th value)
    p = 1500
    table = HashFamily(r, b, seed).table(p)
    logp = torch.full((r, 2, b), value)
    for k in (1, 7, p):
        values, indices = fedkernels.bucket_merge_topk(logp, table, k)
        assert torch.equal(indices, torch.arange(k).expand(2, k))
        # all k values are the one merged score (the float32 mean of r copies of value, which need not be
        # value itself: 3 * v / 3 can round), and equal the reference's
        assert torch.equal(values, values[:, :1].expand(2, k))
        check(logp, table, k)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dist=st.sampled_from(DISTS), r=st.integers(1, 4))
def test_k_equals_p_and_single_row(seed, dist, r):
    b, p = 1100, 2500
    table = HashFamily(r, b, seed).table(p)
    logp = scores(dist, (r, 1, b), seed, torch.float32)  # N = 1
    check(logp, table, p)
    check(logp, table, 1)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dist=st.sampled_from(DISTS), r=st.integers(2, 4))
def test_nan_rows_beside_threshold_rows(seed, dist, r):
    # rows with a NaN scan every class (NaN ranks first); the others take the threshold passes
    b, p, n = 1100, 3000, 6
    table = HashFamily(r, b, seed).table(p)
    logp = scores(dist, (r, n, b), seed, torch.float32)
    logp[seed % r, 1, seed % b] = float("nan")
    logp[r - 1, 4, :5] = float("nan")
    for threads in (1, 2):
        with_threads(threads, lambda: check(logp, table, 9))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    r=st.integers(2, 4),
    pos_frac=st.sampled_from([0.0, 0.01, 0.2]),
    neg_frac=st.sampled_from([0.0, 0.01, 0.99]),
    k=st.integers(1, 20),
)
def test_infinities(seed, r, pos_frac, neg_frac, k):
    # +inf in over 1/32 of a table's buckets makes its cutoff +inf; -inf in most makes it -inf;
    # +inf in one table and -inf in another give NaN scores (inf - inf) that rank first
    b, p = 1100, 3000
    g = torch.Generator().manual_seed(seed)
    logp = scores("flat", (r, 2, b), seed, torch.float32)
    u = torch.rand(logp.shape, generator=g)
    logp = torch.where(u < pos_frac, float("inf"), logp)
    logp[1] = torch.where(u[1] > 1 - neg_frac, float("-inf"), logp[1])
    check(logp, HashFamily(r, b, seed).table(p), k)


def test_thread_count_does_not_change_results():
    r, b, p = 4, 2100, 6000
    table = HashFamily(r, b, 3).table(p)
    logp = scores("flat", (r, 16, b), 3, torch.float32)
    one = with_threads(1, lambda: fedkernels.bucket_merge_topk(logp, table, 5))
    two = with_threads(2, lambda: fedkernels.bucket_merge_topk(logp, table, 5))
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
    check(logp, table, 5)


def test_first_pass_stop_is_strict_when_rounding_ties():
    # bfloat16, R = 2, B = 4 (the cutoffs are the row maxima): mean(c) = (1 + 2^-8) / 2 rounds to 0.5, and
    # class 0, which the first pass does not visit (1 - 2^-8 < 1, 2^-9 < 2^-8), also rounds to 0.5: it ties
    # the visited class 1 (1.0 and 0.0) and must win on its smaller id, so the pass may stop only strictly above
    logp = torch.tensor([[[1.0, 1 - 2**-8, -10.0, -10.0]], [[2**-8, 2**-9, 0.0, -10.0]]], dtype=torch.bfloat16)
    table = torch.tensor([[1, 1], [0, 2]], dtype=torch.int32)
    values, indices = fedkernels.bucket_merge_topk(logp, table, 1)
    assert indices.tolist() == [[0]] and values.tolist() == [[0.5]]
    check(logp, table, 1)
