"""Public segmentations: the l1-difference compression that survives secure aggregation.

A masked vector is uniform in the ring, so the run-length codec cannot shrink a client's own
piecewise-constant direction. What can be shrunk is a structure every client agrees on *before*
masking: a segmentation of each flattened tensor into runs, made public by the server. Each client
then contributes one value per segment (the mean of its gradient over the segment, an L2
projection), so the masked vector has ``#segments`` entries instead of ``numel``. Projection is
linear, so the securely summed segment means are exactly the projection of the round's mean
gradient: the only error is the segmentation itself.

The server makes the segmentation from a sum it is allowed to see: every K-th round is dense, and the
runs of ``prox_tv1d(mean gradient, gamma)`` (the l1-difference prox applied once, to the aggregate)
are the segments of the K - 1 rounds that follow (:class:`~fedkernels.fl.privacy.forms.L1DiffForm`).
"""

from __future__ import annotations

import torch

from ...comm import decode_runs, encode_runs
from ...ops.prox import prox_tv1d


def _lengths(starts: torch.Tensor) -> torch.Tensor:
    """Segment lengths from a bool ``[d]`` marking where segments start (position 0 always starts one)."""
    d = starts.numel()
    if d == 0:
        return torch.zeros(0, dtype=torch.int64)
    starts = starts.clone()
    starts[0] = True
    at = starts.nonzero().reshape(-1)
    return torch.diff(at, append=torch.tensor([d], dtype=at.dtype, device=at.device)).to(torch.int64)


def runs_of(values: torch.Tensor) -> torch.Tensor:
    """The run lengths of a 1-D tensor (maximal stretches of equal values).

    Args:
        values: ``[d]``, any dtype.

    Returns:
        int64 ``[S]``, every entry >= 1, summing to ``d`` (``[0]`` values: an empty tensor).
    """
    if values.dim() != 1:
        raise ValueError(f"runs_of takes a 1-D tensor, got shape {tuple(values.shape)}")
    starts = torch.ones_like(values, dtype=torch.bool)
    starts[1:] = values[1:] != values[:-1]
    return _lengths(starts)


def segmentation(mean: torch.Tensor, gamma: float, block_size: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The l1-difference prox of a tensor's mean gradient and the runs of its result.

    Args:
        mean: the round's mean gradient of one tensor (any shape; flattened as the client's prox is).
        gamma: the l1-difference weight (>= 0; 0 gives one segment per distinct neighbour value).
        block_size: the strategy's prox block size (0: one row).

    Returns:
        ``(u, lengths)``: float64 ``u`` of ``mean``'s shape, piecewise constant, equal to
        ``prox_tv1d(mean, gamma)`` (the step ``d = -prox(-eta g, eta gamma) / eta`` at ``g = mean``);
        int64 ``lengths [S]``, the runs of ``u``.
    """
    flat = mean.detach().reshape(-1).double()
    u = prox_tv1d(flat, float(gamma), True, block_size) if flat.numel() else flat
    return u.reshape(mean.shape), runs_of(u)


def encode_segments(lengths: torch.Tensor) -> torch.Tensor:
    """The wire form of a segmentation: the run-length codec's bytes of a float16 vector whose runs are
    the segments (values alternating 0, 1), about 2 bytes and an Elias-gamma length code a segment.

    Args:
        lengths: int64 ``[S]``, positive.

    Returns:
        uint8 ``[bytes]``.
    """
    parity = (torch.arange(lengths.numel()) % 2).to(torch.float16)
    return torch.frombuffer(
        bytearray(encode_runs(torch.repeat_interleave(parity, lengths), "float16")), dtype=torch.uint8
    )


def decode_segments(wire: torch.Tensor, numel: int, name: str) -> torch.Tensor:
    """Inverse of :func:`encode_segments` for a tensor of ``numel`` values (ValueError naming ``name``
    on bytes that are no float16 stream of that many values)."""
    if not isinstance(wire, torch.Tensor) or wire.dtype != torch.uint8 or wire.dim() != 1:
        raise ValueError(f"segments of {name!r} must be a 1-D uint8 tensor of codec bytes")
    try:
        parity = decode_runs(wire, expected_shape=(numel,), expected_dtype="float16", require_finite=True)
    except ValueError as e:
        raise ValueError(f"segments of {name!r} do not decode: {e}") from None
    return runs_of(parity)


def boundary_mask(lengths: torch.Tensor, numel: int) -> torch.Tensor:
    """A segmentation as a fixed-shape state entry: uint8 ``[numel]``, 1 where a segment starts.

    Args:
        lengths: int64 ``[S]``, positive, summing to ``numel``.
    """
    mask = torch.zeros(numel, dtype=torch.uint8)
    if lengths.numel():
        mask[torch.cumsum(lengths, 0)[:-1]] = 1
        mask[0] = 1
    return mask


def lengths_of(mask: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`boundary_mask`: the segment lengths (int64 ``[S]``; the first value always
    starts a segment)."""
    return _lengths(mask.reshape(-1).to(torch.bool))


def segment_means(flat: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The mean of ``flat`` over each segment.

    Args:
        flat: ``[d]`` float.
        lengths: int64 ``[S]``, positive, summing to ``d`` (as :func:`runs_of` and :func:`decode_segments` give).

    Returns:
        float64 ``[S]``.
    """
    ids = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    sums = torch.zeros(lengths.numel(), dtype=torch.float64).index_add_(0, ids, flat.double())
    return sums / lengths.double()


def expand(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`segment_means` on piecewise-constant vectors: ``values[i]`` repeated ``lengths[i]`` times."""
    return torch.repeat_interleave(values, lengths)
