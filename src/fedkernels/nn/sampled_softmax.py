"""The client-side FedSS head: a sampled-softmax classifier over the class rows a client holds."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..ops.sampled import linear_cross_entropy
from ..ops.topk import linear_topk

VARIANTS = ("fedss", "negonly", "posonly", "full")
MAX_EXCLUDE_LOGITS = 1 << 28  # elements of the dense [N, s] logits the ``exclude`` path may build (1 GiB float32)


def logq_correction(num_classes: int, num_positives: int, m: int) -> float:
    """The FedSS logQ offset ``-log(m q)`` of a negative drawn uniformly from the complement.

    ``q = 1 / (num_classes - num_positives)`` is the probability of a class under the sampler, so the
    offset is ``log((num_classes - num_positives) / m)`` (0 when m = 0).
    """
    if m <= 0:
        return 0.0
    return math.log((num_classes - num_positives) / m)


def _reduce(per: torch.Tensor, live: torch.Tensor, reduction: str) -> torch.Tensor:
    """Per-row losses ``[N]`` (0 on ignored rows) reduced as ``linear_cross_entropy`` does: the mean is
    over the live rows."""
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    return per.sum() / live.sum().clamp_min(1)


class SampledSoftmaxHead(nn.Module):
    """Holds the gathered class rows ``W_S`` of one client and computes the FedSS loss on them.

    The rows are ``weight [s, d]`` for the global classes ``class_ids [s]``: first the client's
    ``num_positives`` positive classes, then its sampled negatives. The variants differ only in which
    classes compete with an example's target:

    - ``"fedss"``: positives and negatives, negatives shifted by the logQ correction ``-log(m q)``;
    - ``"posonly"``: the positives only (negative rows, if any, are ignored);
    - ``"negonly"``: the example's own target and the negatives (with the correction), not the
      client's other positives;
    - ``"full"``: every class (``class_ids`` must be ``arange(num_classes)``), the full softmax.

    Every variant runs :func:`fedkernels.linear_cross_entropy` (the compiled, chunked kernel).

    Args:
        weight: ``[s, d]`` gathered rows (copied into a Parameter).
        class_ids: int64 ``[s]`` distinct global class ids of the rows.
        num_positives: how many leading rows are the client's positives.
        num_classes: size of the global label space.
        variant: one of ``"fedss"``, ``"negonly"``, ``"posonly"``, ``"full"``.
        scale: logit temperature (``scale * h @ W.T``).
        cosine: cosine logits, ``scale * normalize(h) @ normalize(W).T`` (FedSS's image-retrieval setup).

    Example:
        >>> pos, neg = torch.tensor([4, 9]), fedkernels.sample_negatives(torch.tensor([4, 9]), 1000, 64, seed=0)
        >>> head = SampledSoftmaxHead.gather(W_global, pos, neg, num_classes=1000)
        >>> loss = head(h, torch.tensor([9, 4, 4]))   # targets are global class ids
        >>> ids, rows = head.updated_rows()           # the payload: [66] ids, [66, d] rows
    """

    # buffers (register_buffer in __init__), declared so type checkers see tensors, not Tensor | Module
    class_ids: torch.Tensor
    bias: torch.Tensor
    _sorted_ids: torch.Tensor
    _sorted_pos: torch.Tensor

    def __init__(
        self,
        weight: torch.Tensor,
        class_ids: torch.Tensor,
        num_positives: int,
        num_classes: int,
        variant: str = "fedss",
        scale: float = 1.0,
        cosine: bool = False,
    ) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if weight.dim() != 2 or class_ids.dim() != 1 or class_ids.numel() != weight.shape[0]:
            raise ValueError(
                f"weight [s, d] and class_ids [s] must agree, got {tuple(weight.shape)} and {tuple(class_ids.shape)}"
            )
        if class_ids.dtype != torch.int64:
            raise ValueError(f"class_ids must be int64, got {class_ids.dtype}")
        if not 0 <= num_positives <= class_ids.numel():
            raise ValueError(f"num_positives must lie in [0, {class_ids.numel()}], got {num_positives}")
        if class_ids.numel() and (int(class_ids.min()) < 0 or int(class_ids.max()) >= num_classes):
            raise IndexError(f"class_ids must lie in [0, {num_classes})")
        order = torch.argsort(class_ids)
        sorted_ids = class_ids[order]
        if sorted_ids.numel() > 1 and bool((sorted_ids[1:] == sorted_ids[:-1]).any()):
            raise ValueError("class_ids must be distinct")
        if variant == "full" and (
            class_ids.numel() != num_classes
            or not torch.equal(class_ids, torch.arange(num_classes, device=class_ids.device))
        ):
            raise ValueError("variant 'full' needs class_ids = arange(num_classes)")
        self.variant = variant
        self.num_classes = int(num_classes)
        self.num_positives = int(num_positives)
        self.scale = float(scale)
        self.cosine = bool(cosine)
        self.weight = nn.Parameter(weight.detach().clone())
        self.register_buffer("class_ids", class_ids.clone())
        self.register_buffer("_sorted_ids", sorted_ids)
        self.register_buffer("_sorted_pos", order)
        m = class_ids.numel() - num_positives
        bias = torch.zeros(class_ids.numel(), dtype=torch.float32, device=weight.device)
        bias[num_positives:] = logq_correction(num_classes, num_positives, m)
        self.register_buffer("bias", bias)

    @classmethod
    def gather(
        cls,
        weight_full: torch.Tensor,
        positives: torch.Tensor,
        negatives: torch.Tensor,
        num_classes: int,
        variant: str = "fedss",
        scale: float = 1.0,
    ) -> SampledSoftmaxHead:
        """Build the head from the global matrix ``weight_full [p, d]``: rows of positives, then negatives.

        ``positives`` are made distinct (sorted); for ``"posonly"`` the negatives are not gathered; for
        ``"full"`` every row is.
        """
        positives = torch.unique(positives)
        if variant == "full":
            ids = torch.arange(num_classes, device=weight_full.device)
            return cls(weight_full[ids], ids, num_classes, num_classes, variant, scale)
        if variant == "posonly":
            negatives = negatives[:0]
        ids = torch.cat([positives, negatives.to(positives.dtype)])
        return cls(weight_full[ids], ids, positives.numel(), num_classes, variant, scale)

    def local_index(self, global_ids: torch.Tensor) -> torch.Tensor:
        """Row positions of global class ids in ``weight`` (IndexError for a class this head does not hold)."""
        pos = torch.searchsorted(self._sorted_ids, global_ids).clamp_max(max(self._sorted_ids.numel() - 1, 0))
        if global_ids.numel() and (
            self._sorted_ids.numel() == 0 or not bool((self._sorted_ids[pos] == global_ids).all())
        ):
            raise IndexError("global_ids contains a class this head does not hold")
        return self._sorted_pos[pos]

    def forward(
        self,
        h: torch.Tensor,
        target: torch.Tensor,
        reduction: str = "mean",
        ignore_index: int = -100,
        exclude: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The variant's loss for features ``h [N, d]`` and global targets ``target`` int64 ``[N]``.

        Targets equal to ``ignore_index`` contribute 0; every other target must be a positive of this
        client (IndexError otherwise). ``reduction`` as in :func:`fedkernels.linear_cross_entropy`.

        ``exclude`` (int64 ``[E, 2]`` of ``(row of h, global class id)``) takes those classes out of
        that row's softmax: for multi-label data, a (sample, label) term that does not compete with
        the sample's other labels. Excluded classes must be among the rows the variant uses
        (IndexError) and never be the row's target (ValueError). Not for ``"negonly"``, which already
        leaves every other positive out.
        This path builds the ``[N, s]`` logits (``s`` the rows the variant uses), not the fused kernel.
        """
        live = target != ignore_index
        local = torch.full_like(target, ignore_index)
        local[live] = self.local_index(target[live])
        if bool((local[live] >= self.num_positives).any()):
            raise IndexError("every target must be one of the client's positive classes")
        w: torch.Tensor = self.weight
        if self.cosine:  # cosine logits: scale * cos(h, w_c) (FedSS's normalised features and rows)
            h, w = nn.functional.normalize(h, dim=1), nn.functional.normalize(w, dim=1)
        if exclude is not None:
            return self._loss_excluding(h, w, local, live, exclude, reduction)
        if self.variant == "full":
            return linear_cross_entropy(h, w, local, None, self.scale, ignore_index, reduction)
        if self.variant == "posonly":
            wp = w[: self.num_positives]
            return linear_cross_entropy(h, wp, local, None, self.scale, ignore_index, reduction)
        if self.variant == "fedss":
            return linear_cross_entropy(h, w, local, self.bias.to(w.dtype), self.scale, ignore_index, reduction)
        # negonly: logsumexp over {target} and the corrected negatives, minus the target logit.
        wn, bn = w[self.num_positives :], self.bias[self.num_positives :].to(w.dtype)
        no_target = torch.full_like(target, ignore_index)
        _, lse_neg = linear_cross_entropy(h, wn, no_target, bn, self.scale, ignore_index, "none", return_lse=True)
        rows = w[local.clamp_min(0)]
        z_t = self.scale * (h * rows).sum(1).to(lse_neg.dtype)
        per = torch.where(live, torch.logaddexp(z_t, lse_neg) - z_t, torch.zeros_like(z_t))
        return _reduce(per, live, reduction)

    def _loss_excluding(
        self,
        h: torch.Tensor,
        w: torch.Tensor,
        local: torch.Tensor,
        live: torch.Tensor,
        exclude: torch.Tensor,
        reduction: str,
    ) -> torch.Tensor:
        """The variant's loss with the ``exclude`` pairs' logits set to -inf (dense ``[N, s]`` logits)."""
        if reduction not in ("none", "sum", "mean"):
            raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
        if self.variant == "negonly":
            raise ValueError("exclude is not for 'negonly': it already leaves every other positive out")
        if exclude.dim() != 2 or exclude.shape[1] != 2 or exclude.dtype != torch.int64:
            got = f"{exclude.dtype} {tuple(exclude.shape)}"
            raise ValueError(f"exclude must be int64 [E, 2] (row, class id), got {got}")
        if exclude.device != h.device:
            raise ValueError(f"exclude must be on h's device ({h.device}), got {exclude.device}")
        n = h.shape[0]
        if exclude.numel() and (int(exclude[:, 0].min()) < 0 or int(exclude[:, 0].max()) >= n):
            raise IndexError(f"exclude rows must lie in [0, {n})")
        used = self.num_positives if self.variant == "posonly" else w.shape[0]
        if n * used > MAX_EXCLUDE_LOGITS:  # the dense path is for a client's small head, not a full softmax at scale
            raise ValueError(
                f"exclude builds [N, s] = [{n}, {used}] logits, over the bound of {MAX_EXCLUDE_LOGITS} elements; "
                "use smaller batches or fewer classes per head"
            )
        cols = self.local_index(exclude[:, 1].contiguous())
        if bool((cols >= used).any()):
            raise IndexError("exclude names a class outside the rows this variant's softmax uses")
        mask = torch.zeros(n, used, dtype=torch.bool, device=h.device)
        mask[exclude[:, 0], cols] = True
        safe = local.clamp_min(0)
        if used and bool((mask.gather(1, safe[:, None])[:, 0] & live).any()):
            raise ValueError("exclude takes a row's own target out of its softmax")
        mask &= live[:, None]  # an ignored row keeps every class, so its (unused) loss stays finite
        z = self.scale * (h @ w[:used].T)
        if self.variant == "fedss":
            z = z + self.bias.to(z.dtype)
        z = z.masked_fill(mask, float("-inf"))
        per = torch.logsumexp(z, dim=1) - z.gather(1, safe[:, None])[:, 0] if used else h.new_zeros(n)
        return _reduce(torch.where(live, per, torch.zeros_like(per)), live, reduction)

    def updated_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The payload after local training: global ids ``[s]`` and the rows ``[s, d]`` (detached)."""
        return self.class_ids.clone(), self.weight.detach().clone()

    @torch.no_grad()
    def predict_topk(self, h: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The k best of the classes this head holds by ``scale * h @ weight.T`` (no logQ correction:
        that is a training-time term), fused (:func:`fedkernels.linear_topk`: never ``[N, s]``).

        Args:
            h: ``[N, d]`` representations.
            k: classes per row, ``0 <= k <= s``.

        Returns:
            ``(values float32 [N, k], global class ids int64 [N, k])``, best first, ties to the smaller row.
        """
        values, rows = linear_topk(h.to(self.weight.dtype), self.weight, k=k, scale=self.scale)
        return values, self.class_ids[rows]
