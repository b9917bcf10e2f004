"""synthetic_multilabel draws its label keys in memory-bounded chunks: the chunking changes nothing,
and the top-k selection equals a full stable argsort."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.data import synthetic as synthetic_mod
from fedkernels.data import synthetic_multilabel


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 6),
    cols=st.integers(1, 40),
    k=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
    ties=st.booleans(),
)
def test_largest_first_equals_a_stable_argsort(rows: int, cols: int, k: int, seed: int, ties: bool) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 3, (rows, cols)).astype(float) if ties else rng.standard_normal((rows, cols))
    k = min(k, cols)
    got = synthetic_mod._largest_first(keys, k)
    want = np.argsort(-keys, axis=1, kind="stable")[:, :k]
    # the same keys, largest first (with ties the ids among equal keys may differ: compare keys)
    np.testing.assert_array_equal(np.take_along_axis(keys, got[:, :k], 1), np.take_along_axis(keys, want, 1))
    if not ties:
        np.testing.assert_array_equal(got[:, :k], want)


@pytest.mark.parametrize("chunk_values", [1, 37, 1000])
def test_chunk_size_does_not_change_the_data(monkeypatch, chunk_values: int) -> None:
    args = dict(num_samples=300, num_features=8, num_classes=120, labels_per_sample=3.0, seed=5)
    full = synthetic_multilabel(**args)
    monkeypatch.setattr(synthetic_mod, "CHUNK_VALUES", chunk_values)
    small = synthetic_multilabel(**args)
    assert torch.equal(full.x, small.x)
    assert torch.equal(full.indptr, small.indptr) and torch.equal(full.indices, small.indices)


def test_a_huge_label_space_stays_within_the_chunk_bound(monkeypatch) -> None:
    seen: list[int] = []
    real = np.random.Generator.gumbel

    class Recording:
        def __init__(self, rng):
            self.rng = rng

        def __getattr__(self, name):
            return getattr(self.rng, name)

        def gumbel(self, *a, size=None, **k):
            seen.append(int(np.prod(size)))
            return real(self.rng, *a, size=size, **k)

    monkeypatch.setattr(synthetic_mod, "numpy_rng", lambda *a: Recording(np.random.default_rng(0)))
    d = synthetic_multilabel(num_samples=50, num_features=4, num_classes=312330, labels_per_sample=2.0)
    assert d.num_classes == 312330 and int(d.indices.max()) < 312330
    assert seen and max(seen) <= max(synthetic_mod.CHUNK_VALUES, 312330)
