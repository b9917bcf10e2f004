"""Fixed-point encoding of real vectors into the ring Z_{2^bits}, where secure aggregation sums them.

A client clamps each coordinate to ``[-bound, bound]`` and sends ``round(x * 2^f) mod 2^bits``. The
sum of ``n`` such values, read back as a signed number, is exact in the ring and never wraps as long
as ``n * (bound * 2^f + 1/2) < 2^(bits-1)``; :func:`fraction_bits` picks the largest ``f`` that keeps
this true, so the decoded sum differs from the real sum by at most ``n / 2^(f+1)`` per coordinate
(each client's rounding error is at most half a step).

Elements are int64 in ``[0, 2^bits)``; on the wire they are int32 for ``bits <= 32`` (the same 4 bytes
per value as float32) and int64 above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

MIN_BITS, MAX_BITS = 8, 62  # 62: two elements add without overflowing int64


def fraction_bits(bits: int, num_clients: int, bound: float) -> int:
    """The largest ``f`` with ``num_clients * (bound * 2^f + 1/2) < 2^(bits-1)``.

    Raises:
        ValueError: no ``f >= 0`` fits (the ring is too small for that many clients at that bound:
            raise ``bits`` or lower the bound), or an argument is out of range.
    """
    if not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"bits must lie in [{MIN_BITS}, {MAX_BITS}], got {bits}")
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"bound must be finite and > 0, got {bound}")
    room = 2.0 ** (bits - 1) / num_clients - 0.5
    f = math.floor(math.log2(room / bound)) if room > 0 else -1
    while f >= 0 and num_clients * (bound * 2.0**f + 0.5) >= 2.0 ** (bits - 1):
        f -= 1  # guard the float log against an edge
    if f < 0:
        raise ValueError(
            f"a {bits}-bit ring cannot hold the sum of {num_clients} values bounded by {bound}: "
            "raise bits or lower the bound"
        )
    return min(f, 52)  # beyond float64's mantissa a finer step adds nothing


@dataclass(frozen=True)
class RingCodec:
    """Encode/decode between float tensors and ring elements for a sum of up to ``num_clients`` values.

    Args:
        bits: the ring is Z_{2^bits}.
        num_clients: the most values that will be summed.
        bound: every coordinate is clamped to ``[-bound, bound]`` before encoding.
    """

    bits: int
    num_clients: int
    bound: float

    @property
    def frac(self) -> int:
        return fraction_bits(self.bits, self.num_clients, self.bound)

    @property
    def modulus(self) -> int:
        return 1 << self.bits

    def step(self) -> float:
        """The value of one ring unit (``2^-f``)."""
        return 2.0**-self.frac

    def error_bound(self, num_summed: int) -> float:
        """The most a decoded sum of ``num_summed`` encodings differs from the sum of the clamped inputs."""
        return num_summed * 0.5 * self.step()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``round(clamp(x) * 2^f) mod 2^bits`` as int64 ``[numel]`` (x flattened; float64 arithmetic)."""
        q = torch.round(x.detach().reshape(-1).double().clamp(-self.bound, self.bound) * 2.0**self.frac)
        return q.to(torch.int64) & (self.modulus - 1)

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a + b`` in the ring."""
        return (a + b) & (self.modulus - 1)

    def sub(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a - b`` in the ring."""
        return (a - b) & (self.modulus - 1)

    def decode(self, s: torch.Tensor) -> torch.Tensor:
        """Ring elements read as signed numbers (``[-2^(bits-1), 2^(bits-1))``), times ``2^-f``: float64."""
        s = s & (self.modulus - 1)
        signed = torch.where(s >= (1 << (self.bits - 1)), s - self.modulus, s)
        return signed.double() * 2.0**-self.frac


def to_wire(ring: torch.Tensor, bits: int) -> torch.Tensor:
    """Ring elements in their wire dtype: int32 (two's complement of the low 32 bits) or int64."""
    if bits > 32:
        return ring
    return torch.where(ring >= (1 << 31), ring - (1 << 32), ring).to(torch.int32)


def from_wire(wire: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`to_wire`: int64 in ``[0, 2^bits)``. Raises ``ValueError`` on a value outside the ring."""
    out = wire.to(torch.int64)
    if bits <= 32:
        out = out & 0xFFFFFFFF
    if out.numel() and (int(out.min()) < 0 or int(out.max()) >= (1 << bits)):
        raise ValueError(f"masked values must lie in [0, 2^{bits})")
    return out


def wire_dtype(bits: int) -> torch.dtype:
    """The dtype ring elements travel in."""
    return torch.int32 if bits <= 32 else torch.int64
