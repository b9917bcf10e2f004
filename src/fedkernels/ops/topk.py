"""Fused linear top-k: inference over very many classes without the ``[N, p]`` scores (docs/api/topk.md)."""

from __future__ import annotations

import math
import numbers

import torch

from .. import _C  # noqa: F401  (loads the extension, whose topk family registers the schema)
from .._validate import check_int
from ._error_types import keeps_error_types


@keeps_error_types
def linear_topk(
    h: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None = None, *, k: int, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest of ``scale * h @ W.T + bias`` per row, without ever holding the ``[N, p]`` scores.

    W is read a tile of classes at a time and each row keeps a running top k, so the extra memory is
    O(N * k + one tile) whatever p is. Scores are float32 dot products (bfloat16 inputs are widened
    exactly), scaled, then biased: ``(scale * dot) + bias``, each rounded to float32.

    Order: descending score; equal scores go to the smaller class id (-0 and +0 are equal); a NaN
    score ranks above every number (as in :func:`torch.topk`), NaNs among themselves by class id, and
    comes back as NaN. The selection is exact for the scores the kernel computes: the same output for
    any thread count. On CPU every dispatch level (AVX2+FMA, portable) computes each score as one
    fused multiply-add chain over d, so duplicate rows of W tie exactly; the CUDA kernel's scores come
    from cuBLAS and may differ from the CPU's in the last bits.

    Not differentiable (an inference op; train with :func:`fedkernels.linear_cross_entropy`).

    Args:
        h: ``[N, d]`` features, float32 or bfloat16.
        W: ``[p, d]`` class rows, the dtype of ``h``, ``p < 2**31``. Any strides (a transposed or
            expanded view is read in place, never copied whole).
        bias: optional ``[p]`` per-class offset, float32 or the dtype of ``W``.
        k: classes per row, ``0 <= k <= p`` (keyword-only).
        scale: multiplies ``h @ W.T`` (not the bias); finite.

    Returns:
        ``(values, indices)``: float32 ``[N, k]`` scores in descending order and their int64 class
        ids ``[N, k]``. ``N = 0`` or ``k = 0`` gives empty outputs; ``p = 0`` allows only ``k = 0``.

    Raises:
        ValueError: a bad dtype, shape, device mix, ``k`` outside ``[0, p]`` or a non-finite scale
            (the message names the argument).

    Example:
        >>> h, W = torch.randn(4, 64), torch.randn(312_330, 64)
        >>> values, classes = linear_topk(h, W, k=5)   # [4, 5] each, never a [4, 312330] matrix
    """
    k = check_int("k", k)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale must be a real number, got {type(scale).__name__}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    for name, t in (("h", h), ("W", W), ("bias", bias)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return torch.ops.fedkernels.linear_topk(h, W, bias, k, float(scale))


@torch.library.register_fake("fedkernels::linear_topk")
def _linear_topk_fake(
    h: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None, k: int, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    # A meta tensor among CPU ones dispatches here, not to a kernel: the launchers' device check, same words.
    for name, t in (("W", W), ("bias", bias)):
        if t is not None and t.device != h.device:
            raise ValueError(f"h and {name} must be on the same device, got {h.device} and {t.device}")
    n = h.shape[0]
    return h.new_empty((n, k), dtype=torch.float32), h.new_empty((n, k), dtype=torch.int64)
