"""Proximal l1-difference (1D total variation) ops for the communication-efficient update (docs/design.md §3)."""

from __future__ import annotations

from typing import Any

import torch

from .. import _C  # noqa: F401  (registers the schemas)
from ._error_types import keeps_error_types

# float lam -> its 0-d float64 tensor per device, so repeated calls skip making one (a cost that
# shows on short rows). Never handed to the caller and never written, so sharing is safe.
_LAM_TENSORS: dict[tuple[float, torch.device], torch.Tensor] = {}
_LAM_TENSORS_MAX = 64


def _cached_lam_tensor(lam: float | torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    if isinstance(lam, torch.Tensor):
        return lam
    key = (float(lam), z.device)
    t = _LAM_TENSORS.get(key)
    if t is None:
        # outside inference mode: a cached inference tensor could not be saved for a later backward
        with torch.inference_mode(False):
            t = torch.scalar_tensor(key[0], dtype=torch.float64, device=z.device)
        if len(_LAM_TENSORS) >= _LAM_TENSORS_MAX:
            _LAM_TENSORS.clear()
        _LAM_TENSORS[key] = t
    return t


def _needs_autograd_layer(z: torch.Tensor, lam: torch.Tensor) -> bool:
    """False when the autograd kernel would only redispatch (no input needs a gradient).

    The Python autograd kernel that ``register_autograd`` installs costs microseconds per call even when
    it just redispatches (dataclass, trampoline; more with cold caches), which is as long as the whole
    solve of a short row. Skipping it is what that kernel does itself in that case; under
    functorch transforms the call always takes the registered path.
    """
    return (torch.is_grad_enabled() and torch._C._any_requires_grad(z, lam)) or (
        torch._C._functorch.peek_interpreter_stack() is not None
    )


@keeps_error_types
def prox_tv1d(z: torch.Tensor, lam: float | torch.Tensor, anchored: bool = True, block_size: int = 0) -> torch.Tensor:
    """Exact 1D total-variation prox of every row of ``z``.

    ``u = argmin_u 0.5 ||u - z||^2 + lam * (sum_{i<d} |u_i - u_{i+1}| + [anchored] |u_d|)`` per row,
    solved exactly in linear time (a taut-string / funnel method, float64 arithmetic for float32 and
    float64 inputs). The anchored term is the last row of the full-rank difference matrix, so the
    solution's last segment is pulled to zero. ``lam = 0`` returns ``z``.

    Args:
        z: float32 or float64 ``[..., d]``; must be finite.
        lam: a float, or a float32/float64 tensor broadcastable to ``z.shape[:-1]`` (one lam per row); >= 0.
        anchored: add the ``|u_d|`` term (the communication-efficient update uses True).
        block_size: if > 0, each row is cut into blocks of this size (the last may be shorter) solved
            independently: differences across block boundaries are not penalised, and with
            ``anchored`` every block's last entry is anchored. Lets one long vector run in parallel.

    Returns:
        ``u`` with the shape and dtype of ``z``; piecewise constant along the last dim.
        Differentiable in ``z`` and (tensor) ``lam``.

    Example:
        >>> z = torch.tensor([3.0, 3.2, -1.0, -0.8, 0.1])
        >>> prox_tv1d(z, 0.5)                    # tensor([2.85, 2.85, -0.4, -0.4, 0.0])
        >>> prox_tv1d(z, 0.5, anchored=False)    # tensor([2.85, 2.85, -0.4, -0.4, -0.4])
    """
    if torch.compiler.is_compiling():
        # dynamo traces the registered op, with a float lam as a graph constant (no module cache)
        if not isinstance(lam, torch.Tensor):
            lam = torch.scalar_tensor(float(lam), dtype=torch.float64, device=z.device)
        return torch.ops.fedkernels.prox_tv1d(z, lam, anchored, block_size)
    lam_t = _cached_lam_tensor(lam, z)
    if _needs_autograd_layer(z, lam_t):
        return torch.ops.fedkernels.prox_tv1d(z, lam_t, anchored, block_size)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.fedkernels.prox_tv1d.default(z, lam_t, anchored, block_size)


@torch.library.register_fake("fedkernels::prox_tv1d")
def _prox_tv1d_fake(z: torch.Tensor, lam: torch.Tensor, anchored: bool = True, block_size: int = 0) -> torch.Tensor:
    return torch.empty_like(z)


@torch.library.register_fake("fedkernels::prox_tv1d_backward")
def _prox_tv1d_backward_fake(
    grad: torch.Tensor, u: torch.Tensor, lam: torch.Tensor, anchored: bool, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(u), torch.empty_like(lam)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _, lam, anchored, block_size = inputs
    ctx.save_for_backward(output, lam)
    ctx.anchored = anchored
    ctx.block_size = block_size


def _backward(ctx: Any, grad_u: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    u, lam = ctx.saved_tensors
    grad_z, grad_lam = torch.ops.fedkernels.prox_tv1d_backward(
        grad_u.contiguous(), u, lam, ctx.anchored, ctx.block_size
    )
    return grad_z, grad_lam, None, None


torch.library.register_autograd("fedkernels::prox_tv1d", _backward, setup_context=_setup_context)
