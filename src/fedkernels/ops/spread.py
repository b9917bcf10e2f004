"""Spreadout ops for FedAwS / FedALC: exact class kNN by tiles and the spreadout loss (docs/design.md §3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .. import _C  # noqa: F401  (registers the schemas)
from ._error_types import keeps_error_types


@dataclass(frozen=True)
class PairWeights:
    """Sparse FedALC pair weights ``alpha[c, c']`` as CSR over classes; pairs not stored weigh 1.

    Attributes:
        indptr: int64 ``[C + 1]``, row pointer.
        indices: int64 ``[nnz]``, column class ids, strictly increasing within each row.
        values: float32 ``[nnz]``, the weights (finite, >= 0).

    Example:
        >>> pw = PairWeights.from_pairs(torch.tensor([0]), torch.tensor([2]), torch.tensor([0.25]), 3)
        >>> pw.dense()[0, 2], pw.dense()[0, 1]   # 0.25 stored, 1.0 absent
    """

    indptr: torch.Tensor
    indices: torch.Tensor
    values: torch.Tensor

    @property
    def num_classes(self) -> int:
        return self.indptr.numel() - 1

    @property
    def nnz(self) -> int:
        return self.indices.numel()

    @staticmethod
    def from_pairs(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, num_classes: int) -> PairWeights:
        """Build from COO triplets ``(rows [n], cols [n], values [n])``; duplicate pairs are an error."""
        rows, cols = rows.to(torch.int64).reshape(-1), cols.to(torch.int64).reshape(-1)
        values = values.to(torch.float32).reshape(-1)
        if not (rows.numel() == cols.numel() == values.numel()):
            raise ValueError("rows, cols and values must have the same length")
        order = torch.argsort(rows * max(num_classes, 1) + cols, stable=True)
        rows, cols, values = rows[order], cols[order], values[order]
        if rows.numel() and (rows.min() < 0 or rows.max() >= num_classes):
            raise IndexError(f"rows must lie in [0, {num_classes})")
        counts = torch.bincount(rows, minlength=num_classes)
        indptr = torch.zeros(num_classes + 1, dtype=torch.int64, device=rows.device)
        indptr[1:] = torch.cumsum(counts, 0)
        if rows.numel() > 1:
            same = (rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])
            if bool(same.any()):
                raise ValueError("duplicate (row, col) pairs in pair weights")
        return PairWeights(indptr, cols.contiguous(), values.contiguous())

    def to(self, device: str | torch.device) -> PairWeights:
        return PairWeights(self.indptr.to(device), self.indices.to(device), self.values.to(device))

    def dense(self) -> torch.Tensor:
        """The full float32 ``[C, C]`` weight matrix (ones where absent). For tests and small C only."""
        c = self.num_classes
        out = torch.ones(c, c, dtype=torch.float32, device=self.values.device)
        rows = torch.repeat_interleave(torch.arange(c, device=self.indptr.device), self.indptr.diff())
        out[rows, self.indices] = self.values
        return out


@keeps_error_types
def knn_classes(W: torch.Tensor, k: int, metric: str = "l2") -> tuple[torch.Tensor, torch.Tensor]:
    """Each class's k nearest other classes, exact, computed by tiles (never the ``[C, C]`` matrix).

    Args:
        W: ``[C, d]`` class embeddings, float32/float16/bfloat16/float64, finite.
        k: neighbours per class, ``0 <= k < C`` (k = 0 gives empty outputs).
        metric: ``"l2"`` (Euclidean distance, not squared) or ``"cosine"`` (``1 - cos``; rows with
            norm below 1e-12 count as norm 1e-12, like ``F.normalize``).

    Returns:
        ``dist`` ``[C, k]`` (float32; float64 for float64 W), ascending per row, and ``idx`` int64
        ``[C, k]``; equal distances are ordered by the smaller class id. Distances are recomputed
        directly in float64 for the selected pairs, not taken from the GEMM identity.

    Example:
        >>> W = torch.randn(1000, 64)
        >>> dist, idx = knn_classes(W, 10)        # [1000, 10] each; idx[c] never contains c
    """
    return torch.ops.fedkernels.knn_classes(W, k, metric)


@keeps_error_types
def spreadout_loss(
    W: torch.Tensor, margin: float, k: int, pair_weight: PairWeights | None = None, metric: str = "l2"
) -> torch.Tensor:
    """FedAwS / FedALC spreadout regulariser over each class's k nearest classes.

    ``sum_c sum_{c' in kNN_k(c)} alpha[c, c'] * max(0, margin - dist(w_c, w_c'))^2``, where the kNN
    are those of :func:`knn_classes` and ``alpha`` comes from ``pair_weight`` (1 for absent pairs;
    ``None`` means all ones, i.e. FedAwS). Differentiable in ``W`` with the neighbour selection held
    constant; the backward touches the selected pairs only.

    Args:
        W: ``[C, d]`` class embeddings.
        margin: hinge margin, >= 0.
        k: neighbours per class, ``0 <= k < C``.
        pair_weight: sparse FedALC weights over ``C`` classes, on W's device, or None.
        metric: ``"l2"`` or ``"cosine"``.

    Returns:
        A scalar (float32; float64 for float64 W).

    Example:
        >>> W = torch.randn(500, 32, requires_grad=True)
        >>> spreadout_loss(W, margin=4.0, k=10).backward()   # W.grad: [500, 32]
    """
    if pair_weight is None:
        return torch.ops.fedkernels.spreadout_loss(W, margin, k, None, None, None, metric)
    return torch.ops.fedkernels.spreadout_loss(
        W, margin, k, pair_weight.indptr, pair_weight.indices, pair_weight.values, metric
    )


@keeps_error_types
def pair_weight_gather(pair_weight: PairWeights, idx: torch.Tensor) -> torch.Tensor:
    """``alpha[c, idx[c, j]]`` as float32 ``[C, k]`` (1 where the pair is not stored)."""
    return torch.ops.fedkernels.pair_weight_gather(pair_weight.indptr, pair_weight.indices, pair_weight.values, idx)


@keeps_error_types
def spreadout_pair_loss(
    W: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, margin: float, metric: str = "l2"
) -> torch.Tensor:
    """The spreadout loss over given pairs ``(c, idx[c, j])`` with weights ``weight [C, k]`` (float32).

    This is :func:`spreadout_loss` with the neighbour selection supplied, e.g. reused across steps.
    """
    return torch.ops.fedkernels.spreadout_pair_loss(W, idx, weight, margin, metric)


# spreadout_loss = knn (no grad) + weight lookup + the differentiable pair loss. Registered as a
# composite, so autograd, fake tensors and torch.compile go through its parts.
@torch.library.impl("fedkernels::spreadout_loss", "CompositeImplicitAutograd")
def _spreadout_loss_composite(
    W: torch.Tensor,
    margin: float,
    k: int,
    pw_indptr: torch.Tensor | None = None,
    pw_indices: torch.Tensor | None = None,
    pw_values: torch.Tensor | None = None,
    metric: str = "l2",
) -> torch.Tensor:
    present = [t is not None for t in (pw_indptr, pw_indices, pw_values)]
    if any(present) and not all(present):
        raise ValueError("pair_weight needs all of indptr, indices and values, or none of them")
    _, idx = torch.ops.fedkernels.knn_classes(W.detach(), k, metric)
    if all(present):
        weight = torch.ops.fedkernels.pair_weight_gather(pw_indptr, pw_indices, pw_values, idx)
    else:
        weight = torch.ones(idx.shape, dtype=torch.float32, device=W.device)
    return torch.ops.fedkernels.spreadout_pair_loss(W, idx, weight, margin, metric)


@torch.library.register_fake("fedkernels::knn_classes")
def _knn_classes_fake(W: torch.Tensor, k: int, metric: str = "l2") -> tuple[torch.Tensor, torch.Tensor]:
    acc = torch.float64 if W.dtype == torch.float64 else torch.float32
    c = W.shape[0]
    return W.new_empty((c, k), dtype=acc), W.new_empty((c, k), dtype=torch.int64)


@torch.library.register_fake("fedkernels::pair_weight_gather")
def _pair_weight_gather_fake(
    indptr: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, idx: torch.Tensor
) -> torch.Tensor:
    return values.new_empty(idx.shape)


@torch.library.register_fake("fedkernels::spreadout_pair_loss")
def _spreadout_pair_loss_fake(
    W: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, margin: float, metric: str = "l2"
) -> torch.Tensor:
    return W.new_empty((), dtype=torch.float64 if W.dtype == torch.float64 else torch.float32)


@torch.library.register_fake("fedkernels::spreadout_pair_loss_backward")
def _spreadout_pair_loss_backward_fake(
    grad: torch.Tensor, W: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, margin: float, metric: str = "l2"
) -> torch.Tensor:
    return torch.empty_like(W)


def _pair_loss_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    W, idx, weight, margin, metric = inputs
    ctx.save_for_backward(W, idx, weight)
    ctx.margin, ctx.metric = margin, metric


def _pair_loss_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    W, idx, weight = ctx.saved_tensors
    gw = torch.ops.fedkernels.spreadout_pair_loss_backward(grad, W, idx, weight, ctx.margin, ctx.metric)
    return gw, None, None, None, None


torch.library.register_autograd("fedkernels::spreadout_pair_loss", _pair_loss_backward, setup_context=_pair_loss_setup)


# knn_classes' CUDA launcher widens its exactness band to the unit roundoff its float32 GEMM really
# runs at, and the LibTorch stable ABI it is built on has no call that reads torch's matmul precision
# setting: it asks this op (csrc/spread/spread_cuda.cpp, gemm_unit_roundoff). The backend is the one
# that runs the GEMM on W's device (cuBLAS for CUDA tensors, mkldnn for the CPU's under the emulator);
# its "none" / "default" inherits the generic setting, whose "none" is IEEE (torch's default).
# 0: IEEE, 1: TF32, 2: bf16 (3, unknown, is taken as the widest).
_FP32_PRECISION_CODES = {"ieee": 0, "none": 0, "default": 0, "tf32": 1, "bf16": 2}


@torch.library.impl("fedkernels::_matmul_fp32_precision", "CompositeImplicitAutograd")
def _matmul_fp32_precision(W: torch.Tensor) -> int:
    backend = torch.backends.cuda.matmul if W.is_cuda else torch.backends.mkldnn.matmul  # type: ignore[attr-defined]
    precision = backend.fp32_precision
    if precision in ("none", "default"):
        precision = torch.backends.fp32_precision  # type: ignore[attr-defined]
    return _FP32_PRECISION_CODES.get(precision, 3)
