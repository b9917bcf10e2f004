"""Hypothesis strategies and helpers shared by the sketch-family tests."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def bucket_scores(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int, ties: bool = False, specials: bool = False
) -> torch.Tensor:
    """Random log-probability-like scores; ``ties`` draws from 4 values, ``specials`` sprinkles NaN/±inf."""
    g = torch.Generator().manual_seed(seed)
    if ties:
        x = torch.tensor([-3.0, -1.0, -0.5, 0.0])[torch.randint(0, 4, shape, generator=g)]
    else:
        x = torch.nn.functional.logsigmoid(3 * torch.randn(shape, generator=g, dtype=torch.float64))
    if specials and x.numel():
        pick = torch.rand(shape, generator=g)
        x = torch.where(pick < 0.05, torch.tensor(float("nan"), dtype=x.dtype), x)
        x = torch.where((pick >= 0.05) & (pick < 0.08), torch.tensor(float("inf"), dtype=x.dtype), x)
        x = torch.where((pick >= 0.08) & (pick < 0.11), torch.tensor(float("-inf"), dtype=x.dtype), x)
    return x.to(dtype)


@st.composite
def merge_problems(draw, max_p: int = 200):
    """(R, N, B, p, dtype, reduce, seed, ties, specials) for bucket_merge-style tests."""
    return dict(
        r=draw(st.integers(1, 6)),
        n=draw(st.integers(0, 6)),
        b=draw(st.integers(1, 40)),
        p=draw(st.integers(0, max_p)),
        dtype=draw(st.sampled_from(FLOAT_DTYPES)),
        reduce=draw(st.sampled_from(["mean", "median"])),
        seed=draw(st.integers(0, 2**32 - 1)),
        ties=draw(st.booleans()),
        specials=draw(st.booleans()),
    )


def assert_same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit-identical values (NaN equal to NaN), same dtype and shape."""
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=0, atol=0, equal_nan=True)


def with_threads(n: int, fn):
    """Run ``fn()`` with torch using ``n`` threads."""
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(n)
        return fn()
    finally:
        torch.set_num_threads(old)
