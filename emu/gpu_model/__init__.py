"""GPU model of every fedkernels CUDA kernel at the bench configurations, from launches the emulator records.

One module per kernel family (``sketch``, ``sampled``, ``partial``, ``prox``, ``spread``, ``topk``: each
holds its kernels' bytes functions, the PyTorch compositions' bounds and the op models), ``common``
(the H100, launch arithmetic, recording), ``configs`` (the bench sizes) and ``report`` (rows and tables).
The command is bench/ops/gpu_model.py (``python -m bench.ops.gpu_model``; its help says how each op is
recorded): bench/ imports emu/, never the other way round.
"""

from __future__ import annotations

from . import common, partial, prox, sampled, sketch, spread, topk

# The kernel families, for code that walks every bytes / composition function.
FAMILIES = (sketch, sampled, partial, prox, spread, topk)

__all__ = ["FAMILIES", "common"]
