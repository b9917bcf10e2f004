"""The vector final pass of knn_classes at the avx2 and avx512 CPU levels (csrc/spread/knn_exact_avx2.cpp,
knn_exact_avx512.cpp): the float64 distances of each row's kept candidates, four candidates per vector
(a partial last group), must be bit-identical to the scalar pass of the generic level and match the
brute-force reference. Drawn cases cover candidate counts that are not multiples of 8 (k + 8, or C - 1 when
k = C - 1), d not a multiple of 16, several 256-row blocks, exact ties and, for cosine, zero rows
(their distances take the non-unit formula: the scalar lanes of a group, or the whole row's scalar
pass when the row itself is zero). A level this CPU (or FK_CPU_ISA) does not allow is skipped.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import spread_ref
from python_tests.support.cpu_levels import at_level


def _knn(W: torch.Tensor, k: int, metric: str, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    with at_level(level):
        return fedkernels.knn_classes(W, k, metric)


@pytest.mark.parametrize("level", ["avx2", "avx512"])
@settings(max_examples=30, deadline=None)
@given(
    c=st.integers(2, 600),
    d=st.integers(1, 70),
    metric=st.sampled_from(["l2", "cosine"]),
    zero_every=st.sampled_from([0, 3, 11]),
    dup_every=st.sampled_from([0, 5]),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_vector_final_pass_is_bit_identical_to_scalar(level, c, d, metric, zero_every, dup_every, scale, seed, data):
    k = data.draw(st.sampled_from(sorted({1, min(10, c - 1), c - 1, data.draw(st.integers(1, c - 1))})))
    W = torch.randn(c, d, generator=torch.Generator().manual_seed(seed)) * scale
    if dup_every:
        W[1::dup_every] = W[0]  # exact ties at distance 0
    if zero_every:
        W[::zero_every] = 0.0
    vec, scalar = _knn(W, k, metric, level), _knn(W, k, metric, "generic")
    assert torch.equal(vec[0], scalar[0]) and torch.equal(vec[1], scalar[1])
    want_d, want_i = spread_ref.knn(W, k, metric)
    assert torch.equal(vec[1], want_i)
    torch.testing.assert_close(vec[0].double(), want_d, rtol=1e-6, atol=1e-6)
