"""Structured fuzzing of the metrics' arguments: predictions and label CSR drawn with hostile values
(ids of -1, -2**63, 2**62, 2**63 - 1; pointers that decrease, start above 0 or end past nnz; repeated
ids) rather than mutated bytes, which rarely keep a CSR consistent enough to reach the id checks. Each
call is a ValueError, or equals the per-sample reference when the arguments are a valid ranking."""

from __future__ import annotations

import itertools
import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.metrics import filter_predictions, ranking_metrics
from python_tests.reference import metrics_ref

IDS = st.integers(0, 6) | st.sampled_from([-1, -2, -(2**63), 2**40, 2**62, 2**63 - 1])


@st.composite
def csr(draw, n: int):
    rows = [draw(st.lists(IDS, max_size=3)) for _ in range(n)]
    indptr = [0]
    for r in rows:
        indptr.append(indptr[-1] + len(r))
    if draw(st.booleans()):  # break the pointers one way or another
        at = draw(st.integers(0, n))
        indptr[at] += draw(st.sampled_from([-3, -1, 1, 2**40]))
    return indptr, [c for r in rows for c in r]


def _valid(topk: list[list[int]], indptr: list[int], indices: list[int]) -> bool:
    n = len(topk)
    ptr_ok = indptr[0] == 0 and all(b >= a for a, b in itertools.pairwise(indptr)) and indptr[-1] == len(indices)
    if not ptr_ok:
        return False
    bound = (2**63 - 1) // (n + 1)
    rows = [indices[indptr[i] : indptr[i + 1]] for i in range(n)]
    return (
        all(0 <= c < bound for c in indices)
        and all(len(set(r)) == len(r) for r in rows)
        and all(-1 <= c < bound for r in topk for c in r)
        and all(len({c for c in r if c >= 0}) == len([c for c in r if c >= 0]) for r in topk)
    )


@settings(max_examples=300, deadline=None, derandomize=True)
@given(data=st.data(), n=st.integers(0, 5), k=st.integers(0, 3))
def test_metrics_refuse_or_match_the_reference(data, n, k):
    topk = [data.draw(st.lists(IDS, min_size=k, max_size=k)) for _ in range(n)]
    indptr, indices = data.draw(csr(n))
    args = (
        torch.tensor(topk, dtype=torch.int64).reshape(n, k),
        torch.tensor(indptr, dtype=torch.int64),
        torch.tensor(indices, dtype=torch.int64),
    )
    try:
        got = ranking_metrics(*args, (1, 2))
        kept = filter_predictions(*args, min(k, 1))
    except ValueError:
        assert not _valid(topk, indptr, indices), (topk, indptr, indices)
        return
    assert _valid(topk, indptr, indices), (topk, indptr, indices)
    labels = [set(indices[indptr[i] : indptr[i + 1]]) for i in range(n)]
    for kk in (1, 2):
        if kk <= k and n:
            want = metrics_ref.precision_at_k(topk, labels, kk)
            assert math.isclose(got[f"P@{kk}"], want, rel_tol=1e-6, abs_tol=1e-12)  # P@k is a float32 mean
            assert math.isclose(got[f"R@{kk}"], metrics_ref.recall_at_k(topk, labels, kk), abs_tol=1e-12)
    assert kept.tolist() == metrics_ref.filter_predictions(topk, labels, min(k, 1))
