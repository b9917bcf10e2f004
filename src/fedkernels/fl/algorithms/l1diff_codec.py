"""The client side of the l1-difference update and its wire format, shared by both l1-difference strategies.

A client with gradient ``g`` at ``x`` takes ``v = x + prox_tv1d(-eta g, eta gamma)`` (anchored, per
flattened tensor) and sends ``d = (x - v) / eta``, which is piecewise constant. Each tensor's ``d``
travels as the run-length / Elias-gamma bytes of :mod:`fedkernels.comm`, stored in the payload as a
uint8 tensor, so the safetensors byte count is the real cost.
"""

from __future__ import annotations

from typing import Callable

import torch

import fedkernels
from fedkernels.comm import decode_runs, encode_runs, quantize_runs

from ..payload import Payload, PayloadError
from ..types import ClientData


def full_gradient(params: list[torch.Tensor], loss_fn: Callable[[ClientData], torch.Tensor], data: ClientData,
                  batch_size: int) -> list[torch.Tensor]:
    """The gradient of the sample-weighted mean loss over all of ``data`` at ``params``, accumulated
    over minibatches in data order (deterministic, no shuffling)."""
    grads = [torch.zeros_like(p) for p in params]
    n = len(data)
    for start in range(0, n, batch_size):
        batch = data.rows(torch.arange(start, min(n, start + batch_size)))
        loss = loss_fn(batch) * (len(batch) / n)
        for acc, g in zip(grads, torch.autograd.grad(loss, params)):
            acc.add_(g)
    return grads


def l1diff_direction(grad: torch.Tensor, gamma: float, eta: float, block_size: int = 0) -> torch.Tensor:
    """``d = (x - v) / eta = -prox_tv1d(-eta g, eta gamma) / eta`` for one tensor (flattened, anchored),
    returned in ``grad``'s shape. gamma = 0 gives ``d = g`` (plain SGD)."""
    flat = grad.detach().reshape(-1).float()
    u = fedkernels.prox_tv1d(-eta * flat, eta * gamma, True, block_size)
    return (-u / eta).reshape(grad.shape)


def encode_direction(d: torch.Tensor, value_dtype: str, levels: int | None) -> torch.Tensor:
    """The wire form of one tensor's direction: codec bytes as a uint8 tensor."""
    if levels is not None:
        d = quantize_runs(d, levels)
    return torch.frombuffer(bytearray(encode_runs(d, value_dtype)), dtype=torch.uint8)


def decode_direction(wire: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Inverse of :func:`encode_direction`, checked: raises ValueError on corrupt bytes, a wrong
    shape or non-finite values (uploads come from untrusted clients)."""
    d = decode_runs(bytes(wire.numpy().tobytes())).float()
    if d.shape != shape:
        raise ValueError(f"decoded update has shape {tuple(d.shape)}, expected {tuple(shape)}")
    if not bool(torch.isfinite(d).all()):
        raise ValueError("decoded update has NaN or inf values")
    return d


def decode_upload(upload: Payload, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
    """Every tensor of an l1-difference upload decoded to its ``shapes[name]``; raises ValueError on
    the first that does not decode (see :func:`decode_direction`)."""
    return {n: decode_direction(upload[n], shape) for n, shape in shapes.items()}


class CheckedUploads:
    """Uploads decoded by the loop's content check, kept for ``aggregate`` so each codec stream is
    decoded once per round, not twice. An entry is keyed by the upload dict's ``id`` and holds the
    dict itself, so the id cannot be reused while the entry lives; ``aggregate`` takes each entry
    once and clears the rest at the end of the round."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Payload, dict[str, torch.Tensor]]] = {}

    def check(self, upload: Payload, shapes: dict[str, torch.Size]) -> None:
        """Decode every tensor of ``upload`` (the l1-difference content check) and keep the result;
        raises PayloadError (the client is recorded as rejected) when a stream is corrupt,
        mis-shaped or non-finite."""
        decoded = {}
        for n, shape in shapes.items():
            try:
                decoded[n] = decode_direction(upload[n], shape)
            except ValueError as e:
                raise PayloadError(f"tensor {n!r} is not a valid l1-difference stream: {e}") from e
        self._by_id[id(upload)] = (upload, decoded)

    def decoded(self, upload: Payload, shapes: dict[str, torch.Size]) -> dict[str, torch.Tensor]:
        """``upload`` decoded to ``shapes``: the kept result when this very dict was checked with the
        same shapes, else decoded now (ValueError on a bad stream, as :func:`decode_upload`)."""
        kept = self._by_id.pop(id(upload), None)
        if kept is not None and kept[0] is upload and {n: d.shape for n, d in kept[1].items()} == dict(shapes):
            return kept[1]
        return decode_upload(upload, shapes)

    def clear(self) -> None:
        """Drop what is kept (end of a round)."""
        self._by_id.clear()
