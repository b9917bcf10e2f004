"""Top-k inference through a model's last linear layer without its ``[N, p]`` output (fused linear_topk)."""

from __future__ import annotations

import torch
from torch import nn

from ..ops.topk import linear_topk


@torch.no_grad()
def sequential_topk(model: nn.Module, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The top k classes of ``model(x)`` for a model whose last layer is an ``nn.Linear``.

    Runs every layer but the last as usual, then :func:`fedkernels.linear_topk` on the last layer's
    weight and bias, so the ``[N, p]`` logits are never built: the evaluation of a 312,330-class model
    needs memory for the hidden activations and the ``[N, k]`` answer only.

    Args:
        model: ``nn.Sequential`` ending in ``nn.Linear(hidden, p)``.
        x: ``[N, F]`` inputs (whatever the first layer takes, e.g. a ``torch.sparse_csr`` tensor).
        k: classes per row, ``0 <= k <= p``.

    Returns:
        ``(values float32 [N, k], indices int64 [N, k])``, ``values`` the logits, descending (ties to the
        smaller class id, as :func:`fedkernels.linear_topk` orders them).

    Example:
        >>> model = nn.Sequential(nn.Linear(100, 32), nn.ReLU(), nn.Linear(32, 312_330))
        >>> values, classes = sequential_topk(model, torch.randn(8, 100), k=5)   # [8, 5] each
    """
    if not isinstance(model, nn.Sequential) or len(model) == 0 or not isinstance(model[-1], nn.Linear):
        raise TypeError("model must be an nn.Sequential whose last layer is an nn.Linear")
    head = model[-1]
    h = model[:-1](x)
    return linear_topk(h.to(head.weight.dtype), head.weight, head.bias, k=k)
