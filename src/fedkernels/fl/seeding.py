"""The run's seed derivation, from :mod:`fedkernels.seeding` (below the data layer, which uses it too)."""

from ..seeding import derive_seed, generator, numpy_rng

__all__ = ["derive_seed", "generator", "numpy_rng"]
