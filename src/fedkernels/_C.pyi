"""Types of the compiled module's Python functions (csrc/ops.cpp, csrc/comm/*.cpp).

The ops themselves are in ``torch.ops.fedkernels``; this module only holds these host-side helpers.
Keep in step with the ``m.def`` lines there.
"""

from collections.abc import Sequence
from typing import Any

from typing_extensions import Buffer

def hash_params(seed: int, num_tables: int) -> list[int]:
    """Hash-family parameters (a, b, c, d) per table from splitmix64(seed), as a flat list of uint64."""

def build_info() -> dict[str, Any]:
    """What this build of fedkernels was compiled with."""

def _set_cpu_isa_limit(level: str | None) -> str:
    """Tests only: cap the CPU level below the import-time one (None: no extra cap); returns the level in use."""

def rle_encode(words: Buffer, code: int, shape: Sequence[int]) -> bytes:
    """The run-length stream of the words (runs of bit-identical words), header and CRC-32 included."""

def rle_decode(
    data: Buffer,
    expected_shape: Sequence[int] | None,
    expected_code: int,
    max_numel: int,
    require_finite: bool,
    widen: bool,
) -> tuple[int, list[int], bytearray]:
    """Inverse of rle_encode, checked before allocating: (code, shape, bytearray). ValueError on bad data."""

def rle_read_header(data: Buffer) -> tuple[int, list[int], int, int]:
    """(code, shape, runs, header bytes) of a stream; ValueError if the header does not fit the stream."""

def kmeans1d(values: Sequence[float], weights: Sequence[float], k: int) -> tuple[list[float], list[int], float]:
    """Exact weighted 1D k-means (DP, monotone divide and conquer): (centres, labels, cost)."""
