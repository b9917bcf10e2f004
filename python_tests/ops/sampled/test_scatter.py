"""scatter_rows_mean: weighted row means against the loop reference, bit-determinism, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import sampled_ref


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.view({torch.float64: torch.int64, torch.float32: torch.int32}.get(x.dtype, torch.int16))


@st.composite
def scatter_case(draw):
    n = draw(st.integers(1, 40))
    d = draw(st.integers(0, 20))
    t = draw(st.integers(0, 80))
    idx = draw(st.lists(st.integers(0, n - 1), min_size=t, max_size=t))
    # weights >= 0 with zeros allowed, but every named row keeps a positive total
    weight = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0, 1e-3, 250.0]), min_size=t, max_size=t))
    for r in set(idx):
        if all(weight[i] == 0.0 for i in range(t) if idx[i] == r):
            weight[idx.index(r)] = 1.0
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16]))
    return n, d, idx, weight, dtype, draw(st.integers(0, 2**31))


@given(case=scatter_case())
def test_matches_reference(case):
    n, d, idx, weight, dtype, seed = case
    g = torch.Generator().manual_seed(seed)
    out = torch.randn(n, d, generator=g).to(dtype)
    before = out.clone()
    src = torch.randn(len(idx), d, generator=g).to(dtype)
    idx_t = torch.tensor(idx, dtype=torch.int64)
    w = torch.tensor(weight, dtype=torch.float32)
    want = sampled_ref.scatter_rows_mean(before, idx_t, src, w)
    got = fedkernels.scatter_rows_mean(out, idx_t, src, w)
    assert got is out  # in place, returns out
    untouched = sorted(set(range(n)) - set(idx))
    assert torch.equal(out[untouched], before[untouched])  # rows nobody sent keep their bits
    torch.testing.assert_close(out, want.to(dtype))  # the dtype's tolerance (one rounding at the end)
    assert torch.equal(_bits(out), _bits(sampled_ref.scatter_rows_mean_in_order(before, idx_t, src, w)))


def test_hand_computed():
    out = torch.full((4, 2), 7.0)
    fedkernels.scatter_rows_mean(
        out,
        torch.tensor([2, 0, 2, 2]),
        torch.tensor([[1.0, 2.0], [5.0, 5.0], [3.0, 4.0], [9.0, 9.0]]),
        torch.tensor([1.0, 2.0, 3.0, 0.0]),
    )
    assert out.tolist() == [[5.0, 5.0], [7.0, 7.0], [2.5, 3.5], [7.0, 7.0]]


def test_bit_identical_across_threads_and_runs():
    g = torch.Generator().manual_seed(0)
    n, d, t = 3000, 64, 20000
    idx = torch.randint(0, n, (t,), generator=g)
    src = torch.randn(t, d, generator=g) * torch.logspace(-3, 3, t)[:, None]  # cancellation-prone magnitudes
    w = torch.rand(t, generator=g) + 0.01
    base = torch.randn(n, d, generator=g)
    old = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, max(2, old), 1, max(2, old)):
            torch.set_num_threads(threads)
            outs.append(fedkernels.scatter_rows_mean(base.clone(), idx, src, w))
    finally:
        torch.set_num_threads(old)
    for o in outs[1:]:
        assert torch.equal(o, outs[0])


def test_float64_weight_and_empty():
    out = torch.ones(3, 2)
    assert torch.equal(
        fedkernels.scatter_rows_mean(out, torch.zeros(0, dtype=torch.int64), torch.zeros(0, 2), torch.zeros(0)),
        torch.ones(3, 2),
    )
    fedkernels.scatter_rows_mean(
        out, torch.tensor([1]), torch.tensor([[4.0, 6.0]]), torch.tensor([2.0], dtype=torch.float64)
    )
    assert out[1].tolist() == [4.0, 6.0]


def test_on_device(device):
    g = torch.Generator().manual_seed(1)
    out = torch.randn(50, 300, generator=g)
    idx = torch.randint(0, 50, (200,), generator=g)
    src = torch.randn(200, 300, generator=g)
    w = torch.rand(200, generator=g) + 0.1
    want = fedkernels.scatter_rows_mean(out.clone(), idx, src, w)
    got = fedkernels.scatter_rows_mean(out.to(device), idx.to(device), src.to(device), w.to(device))
    assert got.device.type == device
    torch.testing.assert_close(got.cpu(), want)


def _args():
    return torch.zeros(5, 3), torch.tensor([0, 4, 4]), torch.ones(3, 3), torch.tensor([1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda a: (a[0], torch.tensor([0, 5, 1]), a[2], a[3]), IndexError, "idx"),
        (lambda a: (a[0], torch.tensor([0, -1, 1]), a[2], a[3]), IndexError, "idx"),
        (lambda a: (a[0], a[1].int(), a[2], a[3]), ValueError, "idx"),
        (lambda a: (a[0], a[1], a[2].double(), a[3]), ValueError, "src"),
        (lambda a: (a[0], a[1], a[2][:, :2], a[3]), ValueError, "src"),
        (lambda a: (a[0], a[1], a[2][:2], a[3]), ValueError, "src"),
        (lambda a: (a[0], a[1], a[2], a[3][:2]), ValueError, "weight"),
        (lambda a: (a[0], a[1], a[2], torch.tensor([1.0, -1.0, 3.0])), ValueError, "weight"),
        (lambda a: (a[0], a[1], a[2], torch.tensor([1.0, float("nan"), 3.0])), ValueError, "weight"),
        (lambda a: (a[0], a[1], a[2], torch.tensor([1.0, 0.0, 0.0])), ValueError, "weight"),
        (lambda a: (a[0], a[1], a[2], a[3].long()), ValueError, "weight"),
        (lambda a: (a[0].long(), a[1], a[2].long(), a[3]), ValueError, "out"),
        (lambda a: (torch.zeros(3, 5).t(), a[1], a[2], a[3]), ValueError, "out"),
    ],
)
def test_bad_input_leaves_out_untouched(mutate, exc, match):
    args = mutate(_args())
    before = args[0].clone()
    with pytest.raises(exc, match=match):
        fedkernels.scatter_rows_mean(*args)
    assert torch.equal(args[0], before)


def test_opcheck_and_compile():
    torch.library.opcheck(torch.ops.fedkernels.scatter_rows_mean.default, _args())

    def agg(out, idx, src, w):
        return fedkernels.scatter_rows_mean(out, idx, src, w) * 1.0

    compiled = torch.compile(agg, fullgraph=True)
    a, b = _args(), _args()
    torch.testing.assert_close(compiled(*a), agg(*b))


@pytest.mark.parametrize(
    "n, t, d, popular",
    [
        (4096, 70000, 37, False),  # every row many sources; the counting sort in several blocks
        (131072, 40000, 256, False),  # mostly single-source rows, the benchmark's width
        (2_000_000, 3000, 5, False),  # ids over far more rows than sources: the comparison sort
        (5000, 50000, 19, True),  # a few popular rows hold half the sources
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_exact_rounding_order_any_threads(n, t, d, popular, dtype):
    # The documented order, to the bit: acc = 0, acc += w * src per source in order of t, then / sum w.
    g = torch.Generator().manual_seed(n + t)
    idx = torch.randint(0, n, (t,), generator=g)
    if popular:
        hot = torch.rand(t, generator=g) < 0.5
        idx[hot] = torch.randint(0, 8, (int(hot.sum()),), generator=g)
    src = (torch.randn(t, d, generator=g) * torch.logspace(-3, 3, t)[:, None]).to(dtype)
    src[:, 0] = -0.0  # a lone source of -0 must give +0 (0 + w * -0), as zeroing acc first does
    w = torch.rand(t, generator=g) + 0.01
    w[::7] = 0.0  # zero weights add +-0 products; rows left with no weight at all get theirs back
    w[torch.zeros(n).index_add_(0, idx, w)[idx] == 0] = 1.0
    base = torch.randn(n, d, generator=g).to(dtype)
    want = sampled_ref.scatter_rows_mean_in_order(base, idx, src, w)
    old = torch.get_num_threads()
    try:
        for threads in (1, max(2, old)):
            torch.set_num_threads(threads)
            got = fedkernels.scatter_rows_mean(base.clone(), idx, src, w)
            assert torch.equal(_bits(got), _bits(want)), f"{threads} threads"
    finally:
        torch.set_num_threads(old)


@pytest.mark.cpu_path("the CPU kernel's streamed 16-byte row stores")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_streamed_rows_any_alignment(dtype):
    # Outputs of many MiB are streamed past the cache in 16-byte stores: rows that start off a
    # 16-byte boundary (out one element into its storage, odd d) must still get every element.
    g = torch.Generator().manual_seed(7)
    n, t, d = 200_000, 150_000, 61
    idx = torch.randint(0, n, (t,), generator=g)
    src = torch.randn(t, d, generator=g).to(dtype)
    w = torch.rand(t, generator=g) + 0.01
    for offset in (0, 1):
        storage = torch.randn(n * d + 1, generator=g).to(dtype)
        base = storage[offset : offset + n * d].view(n, d)
        want = sampled_ref.scatter_rows_mean_in_order(base, idx, src, w)
        old = torch.get_num_threads()
        try:
            for threads in (1, max(2, old)):
                torch.set_num_threads(threads)
                out = base.clone() if offset == 0 else storage.clone()[offset : offset + n * d].view(n, d)
                got = fedkernels.scatter_rows_mean(out, idx, src, w)
                assert got.data_ptr() == out.data_ptr()
                assert torch.equal(_bits(got), _bits(want)), f"offset {offset}, {threads} threads"
        finally:
            torch.set_num_threads(old)


@pytest.mark.cpu_path("the CPU sort's per-thread scratch")
def test_concurrent_callers_keep_their_own_scratch():
    # The sort's arrays are kept per calling thread between calls: threads calling at once, at
    # different sizes, must each get the single-caller answer.
    import threading

    cases = []
    for k, (n, t) in enumerate([(5000, 40000), (200_000, 30000), (64, 9000), (3000, 3)]):
        g = torch.Generator().manual_seed(k)
        idx = torch.randint(0, n, (t,), generator=g)
        src, w, base = torch.randn(t, 8, generator=g), torch.rand(t, generator=g) + 0.1, torch.randn(n, 8, generator=g)
        cases.append((base, idx, src, w, fedkernels.scatter_rows_mean(base.clone(), idx, src, w)))
    failures = []

    def worker(case):
        base, idx, src, w, want = case
        for _ in range(20):
            got = fedkernels.scatter_rows_mean(base.clone(), idx, src, w)
            if not torch.equal(got, want):
                failures.append(idx.numel())

    threads = [threading.Thread(target=worker, args=(c,)) for c in cases]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures


# ---- inputs that are views of out, and weights whose sum overflows ---------------------------


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda out: (torch.tensor([3, 4, 0]), out[:3], torch.ones(3)), "src"),  # the audit's case
        (lambda out: (torch.tensor([0, 1, 2]), out[3:6], torch.ones(3)), "src"),  # disjoint rows, same storage
        (lambda out: (torch.tensor([5, 5, 5]), out[::2], torch.ones(3)), "src"),  # strided rows
        (lambda out: (torch.tensor([5, 5, 5]), out.t()[:, :3].t(), torch.ones(3)), "src"),
        (lambda out: (torch.tensor([1, 2, 3]), torch.ones(3, 2), out.view(-1)[4:7]), "weight"),
        (lambda out: (out.view(torch.int64).view(-1)[:3], torch.ones(3, 2), torch.ones(3)), "idx"),
    ],
)
def test_inputs_sharing_out_memory_are_refused(make, name, device):
    """A source (or weight, or idx) that is a view of out would be read after its rows were written:
    ValueError naming it, before out is touched, on every device's launcher (the check is in the
    shared host-side checks)."""
    dtype = torch.float64 if name == "idx" else torch.float32
    out = (
        torch.zeros(6, 2, dtype=dtype, device=device)
        if name == "idx"
        else torch.arange(12.0, device=device).reshape(6, 2)
    )
    idx, src, w = make(out)
    idx, src, w = idx.to(device), src.to(device=device, dtype=dtype), w.to(device)
    before = out.clone()
    with pytest.raises(ValueError, match=f"{name} must not share memory with out"):
        fedkernels.scatter_rows_mean(out, idx, src, w)
    assert torch.equal(out, before)


def test_same_storage_without_overlap_is_fine():
    big = torch.arange(20.0).reshape(10, 2)
    out, src = big[:5], big[5:8]  # one storage, disjoint ranges
    want = sampled_ref.scatter_rows_mean_in_order(out.clone(), torch.tensor([0, 0, 4]), src.clone(), torch.ones(3))
    fedkernels.scatter_rows_mean(out, torch.tensor([0, 0, 4]), src, torch.ones(3))
    assert torch.equal(out, want) and torch.equal(big[5:], torch.arange(10.0, 20.0).reshape(5, 2))


@pytest.mark.parametrize(
    "dtype, wdtype, big",
    [
        (torch.float32, torch.float32, 3e38),  # the float32 weight sum overflows
        (torch.bfloat16, torch.float32, 3e38),
        (torch.float16, torch.float16, 6e4),
        (torch.float32, torch.float64, 3e38),
        (torch.float64, torch.float64, 1.5e308),  # the float64 weight sum overflows
        (torch.float32, torch.float32, 1e38),  # no weight sum overflows, but w x does (x = 7, 8)
    ],
)
def test_large_finite_weights_give_the_mean(dtype, wdtype, big, device):
    """Finite weights whose sum (or product with a value) overflows the accumulation dtype: the row is
    the weighted mean, not inf/inf = NaN or inf. Its weights are scaled by a power of two (a mean does
    not depend on the scale), so the result is the documented rounding of the scaled weights, and the
    rows with weights <= 1 are untouched by it."""
    idx = torch.tensor([0, 0, 0, 1, 2, 2])
    src = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, -6.0], [7.0, 8.0], [1.0, 1.0], [3.0, 5.0]]).to(dtype)
    w = torch.tensor([big, big, big / 2, big * 0.75, 0.25, 0.75], dtype=wdtype)
    out = torch.zeros(4, 2, dtype=dtype)
    got = fedkernels.scatter_rows_mean(out.clone().to(device), idx.to(device), src.to(device), w.to(device)).cpu()
    assert bool(torch.isfinite(got).all())
    want = sampled_ref.scatter_rows_mean(out, idx, src, w / big)  # the exact mean (scale-free), float64
    torch.testing.assert_close(got, want.to(dtype))
    assert torch.equal(_bits(got), _bits(sampled_ref.scatter_rows_mean_in_order(out, idx, src, w)))


def test_float64_weights_beyond_float32_are_refused_for_float32_rows():
    out = torch.zeros(3, 2)
    with pytest.raises(ValueError, match=r"weight values must be at most float32's max .* got max 1e\+300"):
        fedkernels.scatter_rows_mean(
            out, torch.tensor([0, 0]), torch.ones(2, 2), torch.tensor([1e300, 1.0], dtype=torch.float64)
        )
    assert torch.equal(out, torch.zeros(3, 2))
    out64 = torch.zeros(3, 2, dtype=torch.float64)  # float64 rows sum float64 weights: fine
    fedkernels.scatter_rows_mean(
        out64,
        torch.tensor([0, 0]),
        torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64),
        torch.tensor([1e300, 1e300], dtype=torch.float64),
    )
    assert out64[0].tolist() == [2.0, 3.0]


@given(
    n=st.integers(1, 6),
    t=st.integers(1, 30),
    seed=st.integers(0, 2**31),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_huge_and_ordinary_weights_mixed(n, t, seed, dtype):
    """Weights anywhere in [0, the accumulation dtype's max]: finite rows, each the documented
    rounding (sampled_ref.scatter_rows_mean_in_order) to the bit, and close to the exact mean."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (t,), generator=g)
    src = torch.randn(t, 3, generator=g).to(dtype)
    wdt = torch.float64 if dtype == torch.float64 else torch.float32
    top = torch.finfo(wdt).max
    w = torch.where(
        torch.rand(t, generator=g) < 0.5,
        torch.rand(t, generator=g, dtype=torch.float64) * top,
        torch.rand(t, generator=g, dtype=torch.float64) + 0.01,
    ).to(wdt)
    out = torch.randn(n, 3, generator=g).to(dtype)
    got = fedkernels.scatter_rows_mean(out.clone(), idx, src, w)
    assert bool(torch.isfinite(got).all())
    assert torch.equal(_bits(got), _bits(sampled_ref.scatter_rows_mean_in_order(out, idx, src, w)))
    torch.testing.assert_close(got, sampled_ref.scatter_rows_mean(out, idx, src, w / top).to(dtype))
