"""knn_classes over several CPU tiles: every tile path (the fused register tiles of the avx512 and avx2
CPU levels, and the generic level's BLAS tiles) against the brute-force reference and each other; a
level this CPU (or FK_CPU_ISA) does not allow is skipped.

Sizes are chosen to cross the 256-row block edges, leave partial 32-column micro-tiles and 16-float
panels (C and d not multiples of 16), and to fill several block groups of the schedule.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests.ops.spread.test_knn import assert_knn_thread_invariant
from python_tests.reference import spread_ref
from python_tests.support.cpu_levels import LEVELS, at_level


def _run(W: torch.Tensor, k: int, metric: str, level: str) -> tuple[torch.Tensor, torch.Tensor]:
    with at_level(level):
        return fedkernels.knn_classes(W, k, metric)


def _assert_matches_reference(W, k, metric, got):
    want_d, want_i = spread_ref.knn(W, k, metric)
    assert torch.equal(got[1], want_i)
    torch.testing.assert_close(got[0].double(), want_d, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("level", ["avx2", "avx512"])
@pytest.mark.parametrize("metric", ["l2", "cosine"])
@pytest.mark.parametrize("c, d", [(700, 5), (529, 16), (613, 33), (300, 70)])
def test_paths_match_reference_and_each_other(c, d, metric, level):
    W = torch.randn(c, d, generator=torch.Generator().manual_seed(c + d))
    fused = _run(W, 10, metric, level)
    blas = _run(W, 10, metric, "generic")
    _assert_matches_reference(W, 10, metric, fused)
    assert torch.equal(fused[0], blas[0]) and torch.equal(fused[1], blas[1])


@pytest.mark.parametrize("path", LEVELS)
def test_duplicates_across_blocks(path):
    # copies of a few vectors spread over all blocks: distance-0 ties across tiles, most rows overflow
    g = torch.Generator().manual_seed(9)
    base = torch.randn(7, 19, generator=g)
    W = base[torch.randint(0, 7, (650,), generator=g)]
    _assert_matches_reference(W, 12, "l2", _run(W, 12, "l2", path))


@pytest.mark.parametrize("path", LEVELS)
def test_integer_ties_cosine_with_zero_rows(path):
    W = torch.randint(-2, 3, (560, 9), generator=torch.Generator().manual_seed(4)).float()
    W[::37] = 0.0  # zero rows: cosine treats them as norm 1e-12
    _assert_matches_reference(W, 9, "cosine", _run(W, 9, "cosine", path))


@settings(max_examples=12)
@given(
    c=st.integers(257, 620),
    d=st.integers(1, 40),
    k=st.integers(1, 20),
    metric=st.sampled_from(["l2", "cosine"]),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
    seed=st.integers(0, 2**31 - 1),
)
def test_multi_block_matches_brute_force(c, d, k, metric, scale, seed):
    W = torch.randn(c, d, generator=torch.Generator().manual_seed(seed)) * scale
    _assert_matches_reference(W, k, metric, fedkernels.knn_classes(W, k, metric))


def test_half_input_multi_block():
    W = torch.randn(530, 24, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    _assert_matches_reference(W, 10, "l2", fedkernels.knn_classes(W, 10))


def test_deterministic_across_threads_multi_group():
    # 40 blocks of 256 rows: 16 block groups, so the round schedule has more tasks than threads
    assert_knn_thread_invariant(torch.randn(10240, 8, generator=torch.Generator().manual_seed(3)))


@settings(max_examples=8, deadline=None)
@given(
    c=st.integers(257, 540),
    d=st.integers(129, 400),
    k=st.integers(1, 20),
    metric=st.sampled_from(["l2", "cosine"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_wide_rows_match_brute_force(c, d, k, metric, seed):
    # d in the hundreds: a micro-tile's two B panels (2 x 16 x d floats) outgrow L1 and the final
    # pass runs several 8-candidate groups of long rows; C leaves a partial last row/column block
    W = torch.randn(c, d, generator=torch.Generator().manual_seed(seed))
    _assert_matches_reference(W, k, metric, fedkernels.knn_classes(W, k, metric))
