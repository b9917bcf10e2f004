"""Spreadout modules for FedAwS / FedALC, built on the compiled spreadout kernels.

- :class:`SpreadoutRegularizer`: the server-side FedAwS/FedALC regulariser as a module.
- :func:`learn_fixed_class_embeddings`: FedALC-fixed — learn the class embeddings once on the server
  before training (co-occurring pairs pulled together, the k nearest others pushed beyond the margin).
"""

from __future__ import annotations

import torch
from torch import nn

from ..ops.spread import PairWeights, knn_classes, pair_weight_gather, spreadout_loss, spreadout_pair_loss

FORMS = ("hinge", "unhinged")


class SpreadoutRegularizer(nn.Module):
    """``weight * spreadout_loss(W, margin, k, pair_weight, metric)`` for class embeddings ``W [C, d]``.

    Example:
        >>> reg = SpreadoutRegularizer(margin=1.0, k=10)         # FedAwS (all pairs weigh 1)
        >>> loss = reg(head.weight)                                # scalar, differentiable in W
    """

    def __init__(
        self, margin: float, k: int, pair_weight: PairWeights | None = None, metric: str = "l2", weight: float = 1.0
    ) -> None:
        super().__init__()
        self.margin, self.k, self.metric, self.weight = float(margin), int(k), metric, float(weight)
        self.pair_weight = pair_weight

    def forward(self, W: torch.Tensor) -> torch.Tensor:
        """``W [C, d]`` -> scalar."""
        pw = self.pair_weight.to(W.device) if self.pair_weight is not None else None
        return self.weight * spreadout_loss(W, self.margin, min(self.k, W.shape[0] - 1), pw, self.metric)


def spreadout_objective(
    W: torch.Tensor,
    k: int,
    margin: float,
    pair_weight: PairWeights | None = None,
    row_scale: torch.Tensor | None = None,
    form: str = "hinge",
    metric: str = "l2",
) -> torch.Tensor:
    """The FedAwS / FedALC server regulariser in its variants, over each class's k nearest classes.

    ``sum_c sum_{c' in kNN_k(c)} s_c alpha[c, c'] * phi(dist(w_c, w_c'))`` with
    ``phi(d) = max(0, margin - d)^2`` (``form="hinge"``, FedAwS's spreadout: only pairs closer than the
    margin are pushed) or ``phi(d) = -d^2`` (``form="unhinged"``: every selected pair is pushed apart,
    the farther the harder, with no margin). ``alpha`` comes from ``pair_weight`` (1 where absent or
    ``None``), ``s_c`` from ``row_scale`` (1 if ``None``; e.g. ``count(c)``, which turns FedALC's
    ``1 - cooc/count`` into the unnormalised ``count - cooc``). The neighbour selection
    (:func:`~fedkernels.ops.knn_classes`, compiled) is held constant; the hinge runs on the compiled
    pair loss, so with no ``row_scale`` it equals :func:`~fedkernels.ops.spreadout_loss`.

    Args:
        W: ``[C, d]`` class embeddings.
        k: neighbours per class, ``0 <= k < C``.
        margin: the hinge's margin (unused by ``"unhinged"``).
        pair_weight: sparse FedALC weights over C classes, or None.
        row_scale: float ``[C]`` per-class factor, or None.
        form: ``"hinge"`` or ``"unhinged"``.
        metric: ``"l2"`` or ``"cosine"``.

    Returns:
        A scalar, differentiable in ``W``.
    """
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    _, idx = knn_classes(W.detach(), k, metric)
    if pair_weight is not None:
        weight = pair_weight_gather(pair_weight.to(W.device), idx)
    else:
        weight = torch.ones(idx.shape, dtype=torch.float32, device=W.device)
    if row_scale is not None:
        if row_scale.shape != (W.shape[0],):
            raise ValueError(f"row_scale must have shape [{W.shape[0]}], got {tuple(row_scale.shape)}")
        weight = weight * row_scale.to(device=W.device, dtype=torch.float32)[:, None]
    if form == "hinge":
        return spreadout_pair_loss(W, idx, weight, margin, metric)
    if metric == "l2":
        dist = (W[:, None, :] - W[idx]).pow(2).sum(-1).clamp_min(0).sqrt()
    else:
        dist = 1.0 - (nn.functional.normalize(W, dim=1)[:, None, :] * nn.functional.normalize(W, dim=1)[idx]).sum(-1)
    return -(weight.to(W.dtype) * dist.pow(2)).sum()


def positive_pull(W: torch.Tensor, pair_weight: PairWeights) -> torch.Tensor:
    """``sum over stored pairs (c, c') of (1 - alpha[c, c']) * ||w_c - w_c'||^2`` (co-occurrence pull).

    ``1 - alpha = cooc(c, c') / count(c)``, so pairs that co-occur more are pulled harder. O(nnz * d).
    """
    pw = pair_weight.to(W.device)
    rows = torch.repeat_interleave(torch.arange(pw.num_classes, device=W.device), pw.indptr.diff())
    strength = (1.0 - pw.values).to(W.dtype)
    return (strength * (W[rows] - W[pw.indices]).pow(2).sum(-1)).sum()


def learn_fixed_class_embeddings(
    pair_weight: PairWeights,
    dim: int,
    *,
    margin: float = 1.0,
    k: int = 10,
    steps: int = 200,
    lr: float = 0.05,
    pull: float = 1.0,
    metric: str = "l2",
    seed: int = 0,
) -> torch.Tensor:
    """FedALC-fixed: unit-norm class embeddings ``[C, dim]`` learned once on the server.

    Minimises ``pull * positive_pull(W) + spreadout_loss(W, margin, k, pair_weight)`` with Adam,
    projecting rows back to the unit sphere after every step (so ``margin`` is on the sphere:
    l2 distances lie in [0, 2]). Deterministic in ``seed``.

    Args:
        pair_weight: FedALC weights over C classes (``LabelSets.pair_weights()``).
        dim: embedding size d.
        margin: the spreadout term's margin.
        k: neighbours per class in the spreadout term.
        metric: ``"l2"`` or ``"cosine"``, the spreadout term's distance.
        steps: Adam iterations.
        lr: Adam step size.
        pull: weight of the co-occurrence pull.
        seed: initialisation seed.

    Returns:
        float32 ``[C, dim]`` with unit-norm rows (detached).

    Example:
        >>> W = learn_fixed_class_embeddings(sets.pair_weights(), 64, margin=1.0, k=10)
    """
    c = pair_weight.num_classes
    g = torch.Generator(device="cpu").manual_seed(seed)  # seeded on the host: the same W on every device
    W = nn.functional.normalize(torch.randn(c, dim, generator=g, device="cpu"), dim=1)
    W = W.to(pair_weight.indptr.device).requires_grad_(True)
    if c < 2:
        return W.detach()
    opt = torch.optim.Adam([W], lr=lr)
    kk = min(k, c - 1)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = pull * positive_pull(W, pair_weight) + spreadout_loss(W, margin, kk, pair_weight, metric)
        loss.backward()
        opt.step()
        with torch.no_grad():
            W.copy_(nn.functional.normalize(W, dim=1))
    return W.detach()
