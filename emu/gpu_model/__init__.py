"""GPU model of every fedkernels CUDA kernel at the bench configurations, from launches the emulator records.

One module per kernel family (``sketch``, ``sampled``, ``partial``, ``prox``, ``spread``, ``topk``: each
holds its kernels' bytes functions, the PyTorch compositions' bounds and the op models), ``common``
(the H100, launch arithmetic, recording), ``configs`` (the bench sizes), ``report`` (rows and tables)
and ``cli`` (the command, run as ``python -m bench.ops.gpu_model``; its help says how each op is recorded).
"""

from __future__ import annotations

from . import common, partial, prox, sampled, sketch, spread, topk
from .cli import main

# The kernel families, for code that walks every bytes / composition function.
FAMILIES = (sketch, sampled, partial, prox, spread, topk)

__all__ = ["FAMILIES", "common", "main"]
