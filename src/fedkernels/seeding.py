"""Every random choice of a run derives from one seed, so runs are reproducible."""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def derive_seed(seed: int, *keys: int | str) -> int:
    """A 63-bit seed for one purpose (e.g. ``derive_seed(seed, "train", round, client)``)."""
    h = hashlib.blake2b(repr((int(seed), *keys)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def generator(seed: int, *keys: int | str) -> torch.Generator:
    """A torch CPU generator seeded by :func:`derive_seed`."""
    return torch.Generator(device="cpu").manual_seed(derive_seed(seed, *keys))


def numpy_rng(seed: int, *keys: int | str) -> np.random.Generator:
    """A numpy generator seeded by :func:`derive_seed`."""
    return np.random.default_rng(derive_seed(seed, *keys))
