"""Top-k inference through a model's last linear layer without its ``[N, p]`` output (fused linear_topk)."""

from __future__ import annotations

import torch
from torch import nn

from ..ops.topk import linear_topk

SPARSE_BLOCK_BYTES = 64 << 20  # dense rows of a sparse input made at a time


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
    if h.layout == torch.strided:
        return linear_topk(h.to(head.weight.dtype), head.weight, head.bias, k=k)
    # A sparse input reaching the last layer directly (a model without hidden layers): the op reads dense
    # rows, so densify a bounded block of rows at a time (never the whole [N, F], never [N, p]).
    if h.layout != torch.sparse_csr:
        h = h.to_sparse_csr()
    n, f = h.shape
    rows = max(1, SPARSE_BLOCK_BYTES // max(1, 4 * f))
    crow, col, val = h.crow_indices(), h.col_indices(), h.values()
    parts = []
    for i in range(0, n, rows) if n else [0]:
        j = min(n, i + rows)
        lo, hi = int(crow[i]), int(crow[j])
        counts = (crow[i + 1 : j + 1] - crow[i:j]).to(torch.int64)
        block = torch.zeros(j - i, f, dtype=head.weight.dtype, device=val.device)
        block[torch.repeat_interleave(torch.arange(j - i, device=val.device), counts), col[lo:hi]] = val[lo:hi].to(
            head.weight.dtype
        )
        parts.append(linear_topk(block, head.weight, head.bias, k=k))
    return torch.cat([v for v, _ in parts]), torch.cat([c for _, c in parts])
