"""count_sketch across the CPU kernel's 16-row blocks and 2048-class chunks, bit for bit.

The hypothesis tests of ops/sketch/test_count.py use p <= 80; these sizes cross chunk boundaries
(p around 2048 and several chunks), mix blocks with leftover rows, change the thread count, and
take B on both sides of the switch between the 32- and 64-byte float passes (sketch_lanes_use_wide).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import count_sketch_np_ref, sketch_ref
from python_tests.support.sketch_strategies import assert_same, with_threads


def _x(rows: int, p: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, p, generator=g)
    x[:, ::7] = 0.0
    x[:, 3::11] = -0.0  # 0 + (-0) is +0: the first add into a bucket must see a real zero
    return x.to(dtype)


@settings(max_examples=25, deadline=None)
@given(
    rows=st.sampled_from([16, 17, 32, 37, 64]),
    p=st.sampled_from([2047, 2048, 2049, 4100, 6200]),
    r=st.integers(1, 4),
    b=st.sampled_from([1, 7, 64, 65, 250, 1000, 5000]),
    seed=st.integers(0, 2**31 - 1),
    threads=st.sampled_from([1, 2]),
)
def test_blocks_match_reference(rows, p, r, b, seed, threads):
    hf = HashFamily(r, b, seed)
    t, s = hf.table(p), hf.signs(p)
    x = _x(rows, p, torch.float32, seed)
    got = with_threads(threads, lambda: fedkernels.count_sketch(x, t, s, b))
    assert_same(got, count_sketch_np_ref.count_sketch(x, t, s, b))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_blocks_other_dtypes(dtype):
    hf = HashFamily(3, 500, seed=9)
    p = 4500
    t, s = hf.table(p), hf.signs(p)
    x = _x(48, p, dtype, 3)
    assert_same(fedkernels.count_sketch(x, t, s, 500), count_sketch_np_ref.count_sketch(x, t, s, 500))


def test_np_reference_matches_loop_reference():
    # the fast reference itself against the obvious loop, where the loop is affordable
    hf = HashFamily(3, 13, seed=4)
    p = 300
    t, s = hf.table(p), hf.signs(p)
    x = _x(5, p, torch.float32, 8)
    assert_same(count_sketch_np_ref.count_sketch(x, t, s, 13), sketch_ref.count_sketch(x, t, s, 13))


def test_repeated_calls_same_bits():
    # per-thread scratch is re-zeroed between blocks and calls: a second call gives the same bits
    hf = HashFamily(4, 1000, seed=2)
    p = 30938
    t, s = hf.table(p), hf.signs(p)
    x = _x(64, p, torch.float32, 1)
    a = fedkernels.count_sketch(x, t, s, 1000)
    b = fedkernels.count_sketch(x, t, s, 1000)
    assert torch.equal(a, b)
    assert_same(a, count_sketch_np_ref.count_sketch(x, t, s, 1000))
