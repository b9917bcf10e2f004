"""Payloads: what crosses the network, as safetensors bytes (never pickle).

Client updates come from untrusted devices, so decoding checks every tensor against a spec
(names, dtypes, shapes, finiteness, size) before anything reaches the global state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

Payload = dict[str, torch.Tensor]

DEFAULT_MAX_BYTES = 1 << 31


class PayloadError(ValueError):
    """A payload was rejected; the message says why. The global state is never touched."""


def encode(payload: Payload, metadata: dict[str, str] | None = None) -> bytes:
    """Serialise named tensors to safetensors bytes (tensors are moved to CPU and made contiguous)."""
    for name, t in payload.items():
        if not isinstance(name, str) or not isinstance(t, torch.Tensor):
            raise PayloadError(f"payload entries must be str -> Tensor, got {type(name).__name__} -> {type(t).__name__}")
    flat = {k: v.detach().to("cpu").contiguous() for k, v in payload.items()}
    return _st_save(flat, metadata=metadata)


@dataclass(frozen=True)
class TensorSpec:
    """What one tensor of a payload must look like. ``None`` in shape means any size on that axis;
    ``shape=None`` means any shape. ``max_value`` bounds integer tensors (exclusive), e.g. class ids."""

    dtype: torch.dtype
    shape: tuple[int | None, ...] | None = None
    finite: bool = True
    min_value: int | None = None
    max_value: int | None = None


@dataclass
class PayloadSpec:
    """The tensors a payload must hold: ``required`` names exactly, plus ``optional`` ones."""

    required: dict[str, TensorSpec]
    optional: dict[str, TensorSpec] = field(default_factory=dict)
    max_bytes: int = DEFAULT_MAX_BYTES
    allow_extra: bool = False


def decode(data: bytes, spec: PayloadSpec | None = None) -> Payload:
    """Parse safetensors bytes into tensors and check them against ``spec``.

    Raises:
        PayloadError: not safetensors, oversize, or a tensor with a wrong name, dtype, shape,
            non-finite value or out-of-range id.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise PayloadError(f"payload must be bytes, got {type(data).__name__}")
    max_bytes = spec.max_bytes if spec is not None else DEFAULT_MAX_BYTES
    if len(data) > max_bytes:
        raise PayloadError(f"payload of {len(data)} bytes exceeds the limit of {max_bytes}")
    try:
        tensors = _st_load(bytes(data))
    except Exception as e:  # safetensors raises its own error types for malformed input
        raise PayloadError(f"payload is not valid safetensors: {e}") from None
    if spec is not None:
        check(tensors, spec)
    return tensors


def check(tensors: Payload, spec: PayloadSpec) -> None:
    """Check decoded tensors against ``spec``; raise :class:`PayloadError` naming the first problem."""
    missing = sorted(set(spec.required) - set(tensors))
    if missing:
        raise PayloadError(f"payload lacks tensors {missing}")
    known = {**spec.required, **spec.optional}
    extra = sorted(set(tensors) - set(known))
    if extra and not spec.allow_extra:
        raise PayloadError(f"payload has unexpected tensors {extra}")
    for name, t in tensors.items():
        ts = known.get(name)
        if ts is None:
            continue
        if t.dtype != ts.dtype:
            raise PayloadError(f"tensor {name!r} has dtype {t.dtype}, expected {ts.dtype}")
        if ts.shape is not None:
            if t.dim() != len(ts.shape) or any(w is not None and w != g for w, g in zip(ts.shape, t.shape)):
                raise PayloadError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {ts.shape}")
        if t.is_floating_point() and ts.finite and t.numel() and not bool(torch.isfinite(t).all()):
            raise PayloadError(f"tensor {name!r} has NaN or inf values")
        if not t.is_floating_point() and t.numel():
            if ts.min_value is not None and int(t.min()) < ts.min_value:
                raise PayloadError(f"tensor {name!r} has values below {ts.min_value}")
            if ts.max_value is not None and int(t.max()) >= ts.max_value:
                raise PayloadError(f"tensor {name!r} has values >= {ts.max_value}")


def state_spec(state: Payload, names: list[str] | None = None) -> dict[str, TensorSpec]:
    """Specs that require exactly the dtypes and shapes of ``state`` (optionally only ``names``)."""
    keys = names if names is not None else list(state)
    return {k: TensorSpec(state[k].dtype, tuple(state[k].shape)) for k in keys}
