"""prox_tv1d's scan paths on long rows: chunks scanned with branches or selects (the choice follows the
density of narrowing events), one-sample pieces, and the early hand-over to the funnel when a row
rescans more than 4 times per fixed sample (a random walk at large lam). All certified exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import prox_ref

CHUNK = 2048  # kTvChunk in csrc/prox/tv1d_direct.h: rows several chunks long switch scan flavours


def _signal(kind: str, d: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=d)
    if kind == "walk":
        return np.cumsum(x)
    if kind == "pwc":
        return 3.0 * np.cumsum(rng.normal(size=d) * (rng.random(d) < 1e-3)) + x
    if kind == "mixed":
        # quiet and loud stretches alternate, so the event density (and the scan flavour) flips
        return x * np.repeat(rng.choice([1e-3, 1.0, 30.0], size=d // CHUNK + 1), CHUNK)[:d]
    return x


def _assert_exact(z: np.ndarray, u: np.ndarray, lam: float, anchored: bool) -> None:
    scale = 1.0 + np.abs(np.cumsum(z)).max() + lam
    v = prox_ref.tv1d_certificate_violation(z, u, lam, anchored)
    assert v <= 1e-9 * scale * len(z), (v, lam, anchored)


@settings(max_examples=25)
@given(
    kind=st.sampled_from(["randn", "walk", "pwc", "mixed"]),
    d=st.integers(3 * CHUNK, 6 * CHUNK),
    lam=st.sampled_from([1e-3, 0.01, 0.1, 1.0, 30.0, 1e4]),
    anchored=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_long_rows_all_scan_paths_exact(kind, d, lam, anchored, seed):
    z = _signal(kind, d, np.random.default_rng(seed))
    u64 = fedkernels.prox_tv1d(torch.tensor(z), lam, anchored)
    _assert_exact(z, u64.numpy(), lam, anchored)
    # float32 input: the float64 solve of the same values, rounded once (whichever path ran)
    z32 = torch.tensor(z, dtype=torch.float32)
    assert torch.equal(
        fedkernels.prox_tv1d(z32, lam, anchored), fedkernels.prox_tv1d(z32.double(), lam, anchored).float()
    )


@pytest.mark.parametrize("lam", [10.0, 100.0])
@pytest.mark.parametrize("anchored", [False, True])
def test_random_walk_large_lam_hands_over_to_funnel(lam, anchored):
    # At lam = 100 this row rescans more than 4 times per fixed sample early on, so the funnel
    # finishes it; at lam = 10 the direct scan stays in budget (checked with a counting build of
    # tv1d_direct.h). Both must pass the dual certificate.
    z = np.cumsum(np.random.default_rng(3).normal(size=200_000))
    u = fedkernels.prox_tv1d(torch.tensor(z), lam, anchored).numpy()
    p = prox_ref.tv1d_dual(z, u)
    tol = 1e-9 * (1.0 + np.abs(np.cumsum(z)).max() + lam)
    assert np.abs(p).max() <= lam + tol
    down, up = u[:-1] > u[1:], u[:-1] < u[1:]
    assert np.abs(p[:-1][down] - lam).max(initial=0) <= tol and np.abs(p[:-1][up] + lam).max(initial=0) <= tol
    if not anchored:
        assert abs(p[-1]) <= tol


@settings(max_examples=40)
@given(
    d=st.integers(300, 5000),
    lam=st.sampled_from([30.0, 100.0, 1000.0]),
    sign=st.sampled_from([1.0, -1.0]),
    anchored=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_funnel_resumes_from_the_direct_scans_last_bend(d, lam, sign, anchored, seed):
    # Short random walks at large lam run the direct scan over budget part way (47 of 64 rows of 1000
    # at lam 100); the funnel then solves only the rest, from the string's last bend, which sits on the
    # lower or the upper wall (the sign flip swaps them). The whole answer must pass the certificate.
    z = sign * np.cumsum(np.random.default_rng(seed).normal(size=d))
    u = fedkernels.prox_tv1d(torch.tensor(z), lam, anchored)
    _assert_exact(z, u.numpy(), lam, anchored)
    z32 = torch.tensor(z, dtype=torch.float32)
    assert torch.equal(
        fedkernels.prox_tv1d(z32, lam, anchored), fedkernels.prox_tv1d(z32.double(), lam, anchored).float()
    )


@given(
    d=st.integers(300, 3000),
    where=st.floats(0, 1, exclude_max=True),
    bad=st.sampled_from([float("nan"), float("inf")]),
    lam=st.sampled_from([100.0, 1000.0]),
    anchored=st.booleans(),
)
def test_non_finite_in_a_handed_over_row_rejected(d, where, bad, lam, anchored):
    # before or after the bend the funnel resumes from: either part's samples are checked
    z = torch.tensor(np.cumsum(np.random.default_rng(d).normal(size=d)))
    z[int(where * d)] = bad
    with pytest.raises(ValueError, match="finite"):
        fedkernels.prox_tv1d(z, lam, anchored)


@given(
    d=st.sampled_from([1, 2, 3, CHUNK + 1, 3 * CHUNK]),
    lam=st.sampled_from([1e-300, 1e-12, 1e-3, 1e3, 1e12, 1e300]),
    value=st.floats(-1e6, 1e6),
    anchored=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_constant_rows_tiny_and_huge_lam(d, lam, value, anchored, dtype):
    z = torch.full((d,), value, dtype=dtype)
    u = fedkernels.prox_tv1d(z, lam, anchored)
    assert u.dtype == dtype and bool(torch.isfinite(u).all())
    # a constant row has no jumps to remove: free keeps it; anchored shrinks it to 0 by at most lam / d
    if not anchored:
        assert torch.allclose(u.double(), z.double(), rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=0.0)
    else:
        want = np.sign(value) * max(abs(float(z[0])) - lam / d, 0.0)
        assert np.allclose(u.double().numpy(), want, rtol=1e-6 if dtype == torch.float32 else 1e-12, atol=1e-300)


@given(
    d=st.integers(1, 3 * CHUNK),
    where=st.floats(0, 1, exclude_max=True),
    bad=st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    lam=st.sampled_from([1e-3, 1.0, 1e4]),
    anchored=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
)
def test_non_finite_anywhere_rejected(d, where, bad, lam, anchored, dtype):
    z = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(d)).to(dtype)
    z[int(where * d)] = bad
    with pytest.raises(ValueError, match="finite"):
        fedkernels.prox_tv1d(z, lam, anchored)


@pytest.mark.parametrize("lam", [1e-3, 0.01])
def test_one_sample_pieces(lam):
    # Small lam on noise: nearly every sample is its own piece, u_k = z_k -+ lam (mostly).
    z = np.random.default_rng(7).normal(size=5 * CHUNK)
    u = fedkernels.prox_tv1d(torch.tensor(z), lam, False).numpy()
    assert np.count_nonzero(np.diff(u)) > 0.9 * len(z)
    _assert_exact(z, u, lam, False)


def test_row_end_bend_reads_nothing_past_the_row():
    # A one-piece anchored row whose end clamps to S_n + lam: S_n summed in order rounds a hair above
    # the upper wall's own sum, so the string bends at the wall point n itself. A piece started there
    # must not read z[n]: here a NaN just past a finite view, which would report "z must be finite".
    big = torch.tensor(
        [0.54338819665865057, -0.092581387529846015, -0.35520398848232498, -1.144769228926432, np.nan],
        dtype=torch.float64,
    )
    z = big[:4]
    u = fedkernels.prox_tv1d(z, 1.0, True)
    assert torch.equal(u, fedkernels.prox_tv1d(z.clone(), 1.0, True))
    _assert_exact(z.numpy(), u.numpy(), 1.0, True)


@given(
    d=st.integers(1, 40),
    lam=st.floats(1e-3, 10.0),
    anchored=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**31),
)
def test_rows_read_only_their_own_samples(d, lam, anchored, dtype, seed):
    # Each row a view into a buffer whose next element is NaN: the answer must not depend on it.
    walk = np.cumsum(np.random.default_rng(seed).normal(size=d))
    buf = torch.tensor(np.append(walk, np.nan)).to(dtype)
    z = buf[:d]
    u = fedkernels.prox_tv1d(z, lam, anchored)
    assert torch.equal(u, fedkernels.prox_tv1d(z.clone(), lam, anchored))
