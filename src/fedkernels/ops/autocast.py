"""Autocast rules of the ops: inside ``torch.autocast`` (any dtype) the fedkernels ops that take
floating-point activations run in float32.

Their kernels accumulate in float32 anyway; what a bf16/f16 region would otherwise hand them is a mix
of dtypes (a bf16 ``h`` from an autocast matmul beside a float32 ``W``), which their checks refuse.
Casting the floating inputs to float32 on entry keeps mixed-precision training safe: the losses,
merges and proxes see full precision, and autograd casts their gradients back.
"""

from __future__ import annotations

import torch

# Ops a forward pass may call with autocast-produced inputs (those that only move integers, and the
# in-place server reductions whose outputs must not be copies, are left out).
FLOAT_OPS = (
    "linear_cross_entropy",
    "linear_cross_entropy_fused",
    "bucket_merge",
    "bucket_merge_topk",
    "count_sketch",
    "count_sketch_query",
    "prox_tv1d",
    "knn_classes",
    "spreadout_pair_loss",
    "spreadout_loss",
)


def register() -> None:
    """Register the float32 autocast rule of every op in :data:`FLOAT_OPS` for the cpu and cuda
    autocast keys (idempotent per process: called once by ``fedkernels.ops``)."""
    for name in FLOAT_OPS:
        for device_type in ("cpu", "cuda"):
            torch.library.register_autocast(f"fedkernels::{name}", device_type, torch.float32)
