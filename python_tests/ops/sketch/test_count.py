"""count_sketch and count_sketch_query: reference, linearity, heavy-hitter recovery, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import sketch_ref
from python_tests.support.sketch_strategies import FLOAT_DTYPES, assert_same, bucket_scores, with_threads

LEADING = [(), (0,), (1,), (3,), (2, 2), (37,)]  # 37 rows: 16-row lane blocks plus leftovers


@given(
    lead=st.sampled_from(LEADING),
    p=st.integers(0, 80),
    r=st.integers(1, 5),
    b=st.integers(1, 30),
    dtype=st.sampled_from(FLOAT_DTYPES),
    seed=st.integers(0, 2**32 - 1),
    specials=st.booleans(),
)
def test_sketch_matches_reference(lead, p, r, b, dtype, seed, specials):
    hf = HashFamily(r, b, seed)
    x = bucket_scores((*lead, p), dtype, seed, specials=specials)
    got = fedkernels.count_sketch(x, hf.table(p), hf.signs(p), b)
    assert got.shape == (*lead, r, b)
    assert_same(got, sketch_ref.count_sketch(x, hf.table(p), hf.signs(p), b))


@given(
    lead=st.sampled_from(LEADING),
    p=st.integers(0, 80),
    r=st.integers(1, 6),
    b=st.integers(1, 30),
    dtype=st.sampled_from(FLOAT_DTYPES),
    seed=st.integers(0, 2**32 - 1),
    reduce=st.sampled_from(["median", "mean", "sum"]),
    specials=st.booleans(),
)
def test_query_matches_reference(lead, p, r, b, dtype, seed, reduce, specials):
    hf = HashFamily(r, b, seed)
    m = bucket_scores((*lead, r, b), dtype, seed, specials=specials)
    got = fedkernels.count_sketch_query(m, hf.table(p), hf.signs(p), reduce)
    assert got.shape == (*lead, p)
    assert_same(got, sketch_ref.count_sketch_query(m, hf.table(p), hf.signs(p), reduce))


@given(seed=st.integers(0, 2**32 - 1), p=st.integers(1, 3000), r=st.integers(1, 6), b=st.integers(1, 500))
def test_linear(seed, p, r, b):
    hf = HashFamily(r, b, seed)
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(2, p, generator=g), torch.randn(2, p, generator=g)
    t, s = hf.table(p), hf.signs(p)
    lhs = fedkernels.count_sketch(x + y, t, s, b)
    rhs = fedkernels.count_sketch(x, t, s, b) + fedkernels.count_sketch(y, t, s, b)
    # float32 sums of <= p terms of size ~1 in different association: a few ulps of the bucket mass
    torch.testing.assert_close(lhs, rhs, rtol=1e-5, atol=1e-5 * max(1.0, p**0.5))


@given(seed=st.integers(0, 2**32 - 1), heavy=st.integers(1, 5), lead=st.sampled_from([(), (2,)]))
def test_median_recovers_sparse_exactly(seed, heavy, lead):
    # 7 tables of 1024 buckets: a class is wrong only if 4 of its 7 buckets collide with one of
    # <= 5 heavy entries (probability ~ 1e-8 per class), so the median returns x exactly.
    p, r, b = 2000, 7, 1024
    hf = HashFamily(r, b, seed)
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(*lead, p)
    ids = torch.randperm(p, generator=g)[:heavy]
    x[..., ids] = torch.randint(-1000, 1000, (*lead, heavy), generator=g).float() + 0.5
    t, s = hf.table(p), hf.signs(p)
    x_hat = fedkernels.count_sketch_query(fedkernels.count_sketch(x, t, s, b), t, s, "median")
    assert torch.equal(x_hat, x)


def test_on_device(device):
    hf = HashFamily(5, 64, seed=1)
    x = bucket_scores((3, 1000), torch.float32, 4)
    t, s = hf.table(1000), hf.signs(1000)
    m = fedkernels.count_sketch(x.to(device), t.to(device), s.to(device), 64)
    assert_same(m, sketch_ref.count_sketch(x, t, s, 64))
    q = fedkernels.count_sketch_query(m, t.to(device), s.to(device), "median")
    assert_same(q, sketch_ref.count_sketch_query(m.cpu(), t, s, "median"))


def test_gradcheck_float64():
    hf = HashFamily(3, 5, seed=2)
    t, s = hf.table(12), hf.signs(12)
    x = torch.randn(2, 12, dtype=torch.float64, requires_grad=True)
    m = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: fedkernels.count_sketch(v, t, s, 5), (x,))
    for reduce in ("mean", "sum"):
        assert torch.autograd.gradcheck(lambda v, reduce=reduce: fedkernels.count_sketch_query(v, t, s, reduce), (m,))
    with pytest.raises(RuntimeError, match="reduce='mean'"):
        fedkernels.count_sketch_query(m, t, s, "median").sum().backward()


def test_opcheck():
    hf = HashFamily(3, 7, seed=3)
    t, s = hf.table(20), hf.signs(20)
    torch.library.opcheck(torch.ops.fedkernels.count_sketch.default, (torch.randn(4, 20, requires_grad=True), t, s, 7))
    torch.library.opcheck(torch.ops.fedkernels.count_sketch.default, (torch.randn(20), t, s, 7))
    for reduce in ("median", "mean", "sum"):
        m = torch.randn(4, 3, 7, requires_grad=reduce != "median")
        torch.library.opcheck(torch.ops.fedkernels.count_sketch_query.default, (m, t, s, reduce))


@pytest.mark.parametrize("rows", [1, 3, 20, 64])
def test_deterministic_across_threads(rows):
    # rows = 3 takes the per-row path with 1 thread and the per-table path with 2; rows = 20 one
    # 16-row lane block with 1 thread and per-row scatters with 2: the same bits either way.
    hf = HashFamily(4, 1000, seed=5)
    t, s = hf.table(30938), hf.signs(30938)
    x = bucket_scores((rows, 30938), torch.float32, 6)
    a = with_threads(1, lambda: fedkernels.count_sketch(x, t, s, 1000))
    b = with_threads(2, lambda: fedkernels.count_sketch(x, t, s, 1000))
    assert torch.equal(a, b)
    qa = with_threads(1, lambda: fedkernels.count_sketch_query(a, t, s, "median"))
    qb = with_threads(2, lambda: fedkernels.count_sketch_query(a, t, s, "median"))
    assert torch.equal(qa, qb)


def _args():
    hf = HashFamily(3, 8, seed=1)
    return torch.randn(2, 10), hf.table(10), hf.signs(10), 8


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda x, t, s, b: (x.long(), t, s, b), ValueError, "x"),
        (lambda x, t, s, b: (x[:, :9], t, s, b), ValueError, "x"),
        (lambda x, t, s, b: (x[0, 0], t, s, b), ValueError, "x"),
        (lambda x, t, s, b: (x, t.float(), s, b), ValueError, "table"),
        (lambda x, t, s, b: (x, t[:, :0], s[:, :0], b), ValueError, "table"),
        (lambda x, t, s, b: (x, t, s, 0), ValueError, "num_buckets"),
        (lambda x, t, s, b: (x, t, s, 4), IndexError, "table"),
        (lambda x, t, s, b: (x, t, s.int(), b), ValueError, "signs"),
        (lambda x, t, s, b: (x, t, s[:, :2], b), ValueError, "signs"),
        (lambda x, t, s, b: (x, t, s * 0, b), ValueError, "signs"),
    ],
)
def test_bad_sketch_input(mutate, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.count_sketch(*mutate(*_args()))


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda m, t, s: (m.long(), t, s, "median"), ValueError, "sketch"),
        (lambda m, t, s: (m[0, 0], t, s, "median"), ValueError, "sketch"),
        (lambda m, t, s: (m[:, :2], t, s, "median"), ValueError, "sketch"),
        (lambda m, t, s: (m[..., :5], t, s, "median"), IndexError, "table"),
        (lambda m, t, s: (m, t, s.int(), "median"), ValueError, "signs"),
        (lambda m, t, s: (m, t, s, "max"), ValueError, "reduce"),
    ],
)
def test_bad_query_input(mutate, exc, match):
    _, t, s, b = _args()
    m = torch.randn(2, 3, b)
    with pytest.raises(exc, match=match):
        fedkernels.count_sketch_query(*mutate(m, t, s))


@given(seed=st.integers(0, 2**32 - 1), r=st.integers(1, 9), rows=st.integers(1, 3))
def test_median_picks_stable_sort_bits(seed, r, rows):
    # Ties and signed zeros everywhere: the median must return exactly the values a stable
    # ascending sort puts in the middle (so -0.0 vs +0.0 is fixed too), bit for bit.
    p, b = 40, 3
    hf = HashFamily(r, b, seed)
    t, s = hf.table(p), hf.signs(p)
    g = torch.Generator().manual_seed(seed)
    m = torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5])[torch.randint(0, 5, (rows, r, b), generator=g)]
    got = fedkernels.count_sketch_query(m, t, s, "median")
    want = torch.empty(rows, p)
    for row in range(rows):
        for i in range(p):
            vals = [m[row, j, t[i, j]] * 1 if s[i, j] > 0 else -m[row, j, t[i, j]] for j in range(r)]
            srt = sorted(vals, key=float)  # stable: equal values (and +-0) keep table order
            want[row, i] = srt[r // 2] if r % 2 else (srt[r // 2 - 1] + srt[r // 2]) * 0.5
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


@pytest.mark.parametrize("value", [v for v in range(-128, 128) if v not in (-1, 1)])
def test_every_bad_sign_value_rejected(value):
    # The CPU check ORs a byte test over all signs in parallel chunks: one bad byte anywhere, of any
    # value, must fail it. 300000 x 2 entries span several chunks; the bad one lands in a late one.
    hf = HashFamily(2, 16, seed=3)
    p = 300_000
    table, signs = hf.table(p), hf.signs(p)
    fedkernels.count_sketch(torch.zeros(1, p), table, signs, 16)  # the valid signs pass
    pos = (value * 7919) % (p * 2)
    bad = signs.clone().view(-1)
    bad[pos] = value
    with pytest.raises(ValueError, match="signs values must be"):
        fedkernels.count_sketch(torch.zeros(1, p), table, bad.view(p, 2), 16)
    # a non-contiguous view of the same values is checked the same way
    with pytest.raises(ValueError, match="signs values must be"):
        fedkernels.count_sketch_query(torch.zeros(2, 16), table, bad.view(p, 2).t().contiguous().t(), "mean")
