"""What this build of fedkernels is: versions, CUDA kernels, threads."""

from __future__ import annotations

import torch

from . import _C


def build_info() -> dict:
    """The build's facts as a dict: version, torch it was built against, CUDA kernels and archs,
    the torch it runs with, whether a GPU is visible, and the intra-op thread count."""
    d = dict(_C.build_info())
    d["torch_runtime"] = torch.__version__
    d["gpu_available"] = torch.cuda.is_available()
    d["threads"] = torch.get_num_threads()
    return d


def info() -> str:
    """A human-readable summary of :func:`build_info`, as printed by ``fedkernels info``."""
    d = build_info()
    lines = [
        f"fedkernels {d['version']}",
        f"built against torch {d['torch_version']} (running torch {d['torch_runtime']})",
        f"CUDA kernels: {'yes, archs ' + (d['cuda_archs'] or 'torch default') if d['cuda_kernels'] else 'no'}",
        f"GPU available: {d['gpu_available']}",
        f"threads: {d['threads']}",
    ]
    return "\n".join(lines)
