"""The hash family every client, the server, CPU and GPU share (docs/design.md §2)."""

from __future__ import annotations

import torch

from . import _C
from ._validate import check_int
from .ops._error_types import keeps_error_types

_UINT64_MAX = (1 << 64) - 1
MAX_TABLES = 1 << 16  # R: far above any sketch's use, small enough that 4R parameters cost nothing
MAX_BUCKETS = (1 << 31) - 1  # B: buckets are int32


@torch.library.register_fake("fedkernels::hash_buckets")
def _hash_buckets_fake(ids: torch.Tensor, params: torch.Tensor, num_buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    n, r = ids.shape[0], params.shape[0]
    return ids.new_empty((n, r), dtype=torch.int32), ids.new_empty((n, r), dtype=torch.int8)


class HashFamily:
    """R independent 2-universal hashes into B buckets plus R sign hashes, from one seed.

    ``h_j(l) = ((a_j l + b_j) mod P) mod B`` and ``s_j(l) = +1`` if ``(c_j l + d_j) mod P`` is even
    else ``-1``, with ``P = 2**61 - 1`` and (a, b, c, d) drawn from splitmix64(seed). The server
    broadcasts only ``(num_tables, num_buckets, seed)``: integers with ``1 <= R <= 2**16``,
    ``1 <= B < 2**31`` (buckets are int32) and ``0 <= seed < 2**64`` (else ``ValueError`` naming it).

    Example:
        >>> hf = HashFamily(num_tables=4, num_buckets=4000, seed=42)
        >>> hf.buckets(torch.tensor([123456])).tolist()
        [[249, 3301, 1735, 105]]
    """

    def __init__(self, num_tables: int, num_buckets: int, seed: int = 0) -> None:
        self.num_tables = check_int("num_tables (R)", num_tables, 1, MAX_TABLES)
        self.num_buckets = check_int("num_buckets (B)", num_buckets, 1, MAX_BUCKETS)
        self.seed = check_int("seed", seed, 0, _UINT64_MAX)
        flat = _C.hash_params(self.seed, self.num_tables)
        # Every parameter is < 2**61, so int64 holds it exactly.
        self.params = torch.tensor(flat, dtype=torch.int64, device="cpu").view(self.num_tables, 4)

    def __repr__(self) -> str:
        return f"HashFamily(num_tables={self.num_tables}, num_buckets={self.num_buckets}, seed={self.seed})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashFamily) and (self.num_tables, self.num_buckets, self.seed) == (
            other.num_tables,
            other.num_buckets,
            other.seed,
        )

    def __hash__(self) -> int:
        return hash((self.num_tables, self.num_buckets, self.seed))

    @keeps_error_types
    def _hash(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(ids, torch.Tensor):
            try:
                ids = torch.as_tensor(ids, dtype=torch.int64, device="cpu")
            except (RuntimeError, OverflowError, TypeError, ValueError) as e:
                raise ValueError(
                    f"ids must be integers in [0, 2**63), got values torch cannot hold as int64 ({e})"
                ) from None
        if ids.dtype != torch.int64:
            raise ValueError(f"ids must be int64, got {ids.dtype}")
        flat = ids.reshape(-1)
        b, s = torch.ops.fedkernels.hash_buckets(flat, self.params.to(flat.device), self.num_buckets)
        return b.view(*ids.shape, self.num_tables), s.view(*ids.shape, self.num_tables)

    def buckets(self, ids: torch.Tensor) -> torch.Tensor:
        """Buckets of any int64 ids in ``[0, 2**63)``: int32 ``[*ids.shape, R]``."""
        return self._hash(ids)[0]

    def sign(self, ids: torch.Tensor) -> torch.Tensor:
        """Signs (+1/-1) of any int64 ids in ``[0, 2**63)``: int8 ``[*ids.shape, R]``."""
        return self._hash(ids)[1]

    def table(self, num_classes: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Buckets of classes ``0..p-1``: int32 ``[p, R]`` (class-major)."""
        return self.buckets(torch.arange(int(num_classes), dtype=torch.int64, device=device))

    def signs(self, num_classes: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Signs of classes ``0..p-1``: int8 ``[p, R]``."""
        return self.sign(torch.arange(int(num_classes), dtype=torch.int64, device=device))
