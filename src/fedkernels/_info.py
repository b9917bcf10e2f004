"""What this build of fedkernels is: versions, CUDA kernels, threads, as the loaded module reports it.

``fedkernels info`` says the same without torch from the build's record (:mod:`fedkernels._build_facts`);
``fedkernels info --runtime`` prints :func:`info`.
"""

from __future__ import annotations

import torch

from . import _C
from ._build_facts import cpu_isa_line, summary

__all__ = ["build_info", "cpu_isa_line", "info"]


def build_info() -> dict:
    """The build's facts as a dict: version, torch it was built against, CUDA kernels and archs, the
    compilers (``compiler``, ``cuda_compiler``) and the CPU levels compiled (``cpu_levels``), the torch it
    runs with, whether a GPU is visible, the intra-op thread count, and the CPU kernels' instruction-set
    level: ``cpu_isa`` (in use), ``cpu_isa_host`` (what this CPU supports) and ``cpu_isa_cap``
    (``FK_CPU_ISA`` as read at import, ``""`` when unset)."""
    d = dict(_C.build_info())
    d["torch_runtime"] = torch.__version__
    d["gpu_available"] = torch.cuda.is_available()
    d["threads"] = torch.get_num_threads()
    return d


def info() -> str:
    """A human-readable summary of :func:`build_info`, as printed by ``fedkernels info --runtime``."""
    return "\n".join(summary(build_info()))
