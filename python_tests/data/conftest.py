"""Fixtures shared by the data tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from fedkernels.data import RemoteDataset, register, unregister


@pytest.fixture
def registered() -> Iterator[Callable[[RemoteDataset], RemoteDataset]]:
    """``add(ds)`` registers ``ds`` for the test (replacing a dataset of its name) and unregisters it after."""
    names: list[str] = []

    def add(ds: RemoteDataset) -> RemoteDataset:
        names.append(ds.name)
        return register(ds, replace=True)

    yield add
    for n in names:
        unregister(n)
