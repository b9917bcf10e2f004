"""The client side of the l1-difference update and its wire format, shared by both l1-difference strategies.

A client with gradient ``g`` at ``x`` takes ``v = x + prox_tv1d(-eta g, eta gamma)`` (anchored, per
flattened tensor) and sends ``d = (x - v) / eta``, which is piecewise constant. Each tensor's ``d``
travels as the run-length / Elias-gamma bytes of :mod:`fedkernels.comm`, stored in the payload as a
uint8 tensor, so the safetensors byte count is the real cost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ...comm import decode_runs, encode_runs, quantize_runs
from ...ops.prox import prox_tv1d
from ..payload import Payload, PayloadError
from ..types import ClientData


def full_gradient(
    params: Sequence[torch.Tensor], loss_fn: Callable[[ClientData], torch.Tensor], data: ClientData, batch_size: int
) -> list[torch.Tensor]:
    """The gradient of the sample-weighted mean loss over all of ``data`` at ``params``, accumulated
    over minibatches in data order (deterministic, no shuffling)."""
    grads = [torch.zeros_like(p) for p in params]
    n = len(data)
    for start in range(0, n, batch_size):
        batch = data.rows(torch.arange(start, min(n, start + batch_size), device=data.device))
        loss = loss_fn(batch) * (len(batch) / n)
        for acc, g in zip(grads, torch.autograd.grad(loss, params), strict=True):
            acc.add_(g)
    return grads


def l1diff_direction(grad: torch.Tensor, gamma: float, eta: float, block_size: int = 0) -> torch.Tensor:
    """``d = (x - v) / eta = -prox_tv1d(-eta g, eta gamma) / eta`` for one tensor (flattened, anchored),
    returned in ``grad``'s shape. gamma = 0 gives ``d = g`` (plain SGD)."""
    flat = grad.detach().reshape(-1).float()
    u = prox_tv1d(-eta * flat, eta * gamma, True, block_size)
    return (-u / eta).reshape(grad.shape)


def encode_direction(d: torch.Tensor, value_dtype: str, levels: int | None) -> torch.Tensor:
    """The wire form of one tensor's direction: codec bytes as a uint8 tensor."""
    if levels is not None:
        d = quantize_runs(d, levels)
    return torch.frombuffer(bytearray(encode_runs(d, value_dtype)), dtype=torch.uint8)


def decode_direction(wire: torch.Tensor, shape: torch.Size, value_dtype: str | None = None) -> torch.Tensor:
    """Inverse of :func:`encode_direction`, checked: raises ValueError on corrupt bytes, a wrong
    shape or value dtype, or non-finite values (uploads come from untrusted clients).

    Args:
        wire: uint8 ``[len]`` codec bytes of one tensor.
        shape: the shape the server expects (the state tensor's); the stream's claimed shape is
            compared with it before anything is allocated.
        value_dtype: ``"float32"``/``"float16"``: the strategy's run-value dtype, or None for either.

    Returns:
        float32 tensor of ``shape`` (float16 run values widened while decoding: memory is the float32
        tensor plus O(len(wire))).
    """
    if not isinstance(wire, torch.Tensor) or wire.dtype != torch.uint8 or wire.dim() != 1:
        raise ValueError("the upload must be a 1-D uint8 tensor of codec bytes")
    return decode_runs(
        wire, expected_shape=tuple(shape), expected_dtype=value_dtype, require_finite=True, out_dtype=torch.float32
    )


def decode_upload(
    upload: Payload, shapes: dict[str, torch.Size], value_dtype: str | None = None
) -> dict[str, torch.Tensor]:
    """Every tensor of an l1-difference upload decoded to its ``shapes[name]``; raises ValueError on
    the first that does not decode (see :func:`decode_direction`)."""
    return {n: decode_direction(upload[n], shape, value_dtype) for n, shape in shapes.items()}


def check_streams(upload: Payload, shapes: dict[str, torch.Size], value_dtype: str | None = None) -> Payload:
    """The l1-difference content check: every tensor of ``upload`` decoded to ``shapes[name]``
    (float32). Raises PayloadError naming the tensor (the client is recorded as rejected) when a
    stream is corrupt, mis-shaped or non-finite."""
    decoded = {}
    for n, shape in shapes.items():
        try:
            decoded[n] = decode_direction(upload[n], shape, value_dtype)
        except ValueError as e:  # the decoder raises nothing else on malformed bytes
            raise PayloadError(f"tensor {n!r} is not a valid l1-difference stream: {e}") from e
    return decoded
