"""Partial weight exchange: fused per-tensor delta norms, top-k tensor selection, and the server's
masked per-tensor weighted average (docs/design.md §3)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .. import _C  # noqa: F401  (registers the schemas)
from ._error_types import keeps_error_types

# A client's contribution: (idx int64 [n], its n tensors, weight).
SentTensors = tuple[torch.Tensor, Sequence[torch.Tensor], float]


def num_selected(num_tensors: int, fraction: float) -> int:
    """How many tensors ``select_topk_tensors`` keeps: ``ceil(fraction * M)``, at least 1, at most M.

    A 1e-9 slack keeps exact products exact (``0.3 * 10`` is 3.0000000000000004 in binary and
    gives 3). Mirrors ``num_selected`` in ``csrc/select/select.h``.
    """
    if num_tensors <= 0:
        return 0
    return min(num_tensors, max(1, math.ceil(fraction * num_tensors - 1e-9)))


@keeps_error_types
def delta_norms(new: Sequence[torch.Tensor], old: Sequence[torch.Tensor], normalize: bool = False) -> torch.Tensor:
    """``||new_t - old_t||_2`` for every pair of tensors, in one pass, without allocating differences.

    Args:
        new: M tensors (float32, float16, bfloat16 or float64; any mix across t), all on one device.
            Non-contiguous tensors are read through a contiguous copy of that tensor.
        old: M tensors; ``old[t]`` has the shape and dtype of ``new[t]``.
        normalize: divide each norm by ``sqrt(numel)`` (the RMS of the change), so large tensors
            do not dominate; 0 for an empty tensor.

    Returns:
        float32 ``[M]`` on the tensors' device (CPU for empty lists).

    Example:
        >>> new = [torch.ones(3, 4), torch.zeros(5)]
        >>> delta_norms(new, [torch.zeros(3, 4), torch.zeros(5)])   # tensor([3.4641, 0.])
    """
    if len(new) == 0 and len(old) == 0:
        return torch.empty(0, dtype=torch.float32, device="cpu")
    return torch.ops.fedkernels.delta_norms(list(new), list(old), normalize)


@keeps_error_types
def select_topk_tensors(
    new: Sequence[torch.Tensor], old: Sequence[torch.Tensor], fraction: float, normalize: bool = False
) -> torch.Tensor:
    """Indices of the ``k = num_selected(M, fraction)`` tensors whose delta norm is largest.

    Descending norm (NaN first, as ``torch.sort(descending=True)``), ties to the smaller index.
    Computed on the tensors' device without a host sync (k depends only on M and fraction).

    Args:
        new: as in ``delta_norms``.
        old: as in ``delta_norms``.
        fraction: in ``(0, 1]``; a tiny fraction keeps one tensor, 1 keeps all.
        normalize: rank by RMS change instead of the plain norm.

    Returns:
        int64 ``[k]``.

    Example:
        >>> new = [torch.ones(2), torch.ones(8), torch.zeros(1)]
        >>> select_topk_tensors(new, [torch.zeros(2), torch.zeros(8), torch.zeros(1)], 0.5)  # tensor([1, 0])
    """
    if len(new) == 0 and len(old) == 0:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
        return torch.empty(0, dtype=torch.int64, device="cpu")
    return torch.ops.fedkernels.select_topk_tensors(list(new), list(old), float(fraction), normalize)


def _flatten_sent(sent: Sequence[SentTensors]) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
    """(flat tensors, client_of int64 [S], tensor_of int64 [S], weights float64 [C]) of ``sent``."""
    flat: list[torch.Tensor] = []
    client_of: list[int] = []
    idx_parts: list[torch.Tensor] = []
    weights: list[float] = []
    for c, item in enumerate(sent):
        if len(item) != 3:
            raise ValueError(f"sent[{c}] must be a tuple (idx, tensors, weight), got {len(item)} items")
        idx, tensors, w = item
        if not isinstance(idx, torch.Tensor) or idx.dtype != torch.int64 or idx.dim() != 1:
            raise ValueError(f"sent[{c}] idx must be a 1-D int64 tensor")
        if idx.numel() != len(tensors):
            raise ValueError(f"sent[{c}]: idx has {idx.numel()} entries but {len(tensors)} tensors were sent")
        flat.extend(tensors)
        client_of.extend([c] * len(tensors))
        idx_parts.append(idx.cpu())  # host metadata (one small copy if idx lives on a GPU)
        weights.append(float(w))
    tensor_of = torch.cat(idx_parts) if idx_parts else torch.empty(0, dtype=torch.int64, device="cpu")
    return (
        flat,
        torch.tensor(client_of, dtype=torch.int64, device="cpu"),
        tensor_of,
        torch.tensor(weights, dtype=torch.float64, device="cpu"),
    )


@keeps_error_types
def masked_weighted_average(dst: Sequence[torch.Tensor], sent: Sequence[SentTensors]) -> None:
    """In place, one pass: ``dst[t] = sum_k w_k x_k^t / sum_k w_k`` over the clients k that sent t.

    Tensors no client sent keep their value. Accumulation runs in client order (deterministic);
    float32 accumulation for float32/16-bit tensors, float64 for float64.

    Args:
        dst: M tensors, updated in place (non-contiguous ones through a contiguous copy).
        sent: per client ``(idx, tensors, w)``: ``idx`` int64 ``[n]`` (distinct indices into dst),
            ``tensors`` n tensors with the shape, dtype and device of ``dst[idx[i]]``, ``w >= 0``
            (e.g. the client's number of samples).

    Raises:
        IndexError: an idx outside ``[0, M)``.
        ValueError: duplicate idx within a client, shape / dtype / device mismatch, list length
            mismatch, negative or non-finite weights, or weights of a sent tensor's senders summing
            to zero.

    Example:
        >>> dst = [torch.zeros(2), torch.zeros(3)]
        >>> masked_weighted_average(dst, [(torch.tensor([1]), [torch.ones(3)], 1.0),
        ...                               (torch.tensor([1]), [torch.full((3,), 4.0)], 3.0)])
        >>> dst[1]   # tensor([3.2500, 3.2500, 3.2500]); dst[0] untouched
    """
    flat, client_of, tensor_of, weights = _flatten_sent(sent)
    torch.ops.fedkernels.masked_weighted_average(list(dst), flat, client_of, tensor_of, weights)


@torch.library.register_fake("fedkernels::delta_norms")
def _delta_norms_fake(new: list[torch.Tensor], old: list[torch.Tensor], normalize: bool) -> torch.Tensor:
    _check_fake_devices([*new, *old], "new")
    return new[0].new_empty((len(new),), dtype=torch.float32)


@torch.library.register_fake("fedkernels::select_topk_tensors")
def _select_topk_tensors_fake(
    new: list[torch.Tensor], old: list[torch.Tensor], fraction: float, normalize: bool
) -> torch.Tensor:
    _check_fake_devices([*new, *old], "new")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    return new[0].new_empty((num_selected(len(new), fraction),), dtype=torch.int64)


@torch.library.register_fake("fedkernels::masked_weighted_average")
def _masked_weighted_average_fake(
    dst: list[torch.Tensor],
    sent: list[torch.Tensor],
    client_of: torch.Tensor,
    tensor_of: torch.Tensor,
    weights: torch.Tensor,
) -> None:
    _check_fake_devices([*dst, *sent], "dst + sent")
    return None


def _check_fake_devices(tensors: Sequence[torch.Tensor], name: str) -> None:
    # The compiled kernels check devices; the fake (meta) path must reject the same inputs.
    for i, t in enumerate(tensors):
        if t.device != tensors[0].device:
            raise ValueError(f"{name}[{i}] must be on the device of {name}[0] ({tensors[0].device}), got {t.device}")


def _delta_norms_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    new, old, normalize = inputs
    ctx.num_tensors = len(new)
    ctx.normalize = normalize
    ctx.save_for_backward(*new, *old, output)


def _delta_norms_backward(ctx: Any, grad: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor], None]:
    # d||a - b|| / da = (a - b) / ||a - b||; the RMS adds 1 / numel; 0 where the norm is 0.
    m = ctx.num_tensors
    saved = ctx.saved_tensors
    norms = saved[2 * m]
    grads_new: list[torch.Tensor] = []
    grads_old: list[torch.Tensor] = []
    for t in range(m):
        a, b = saved[t], saved[m + t]
        denom = norms[t] * (a.numel() if ctx.normalize else 1)
        scale = torch.where(norms[t] > 0, grad[t] / denom, torch.zeros_like(denom))
        g = ((a - b) * scale).to(a.dtype)
        grads_new.append(g)
        grads_old.append(-g)
    return grads_new, grads_old, None


torch.library.register_autograd("fedkernels::delta_norms", _delta_norms_backward, setup_context=_delta_norms_setup)
