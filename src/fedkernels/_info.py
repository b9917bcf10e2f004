"""What this build of fedkernels is: versions, CUDA kernels, threads."""

from __future__ import annotations

import torch

from . import _C


def build_info() -> dict:
    """The build's facts as a dict: version, torch it was built against, CUDA kernels and archs,
    the torch it runs with, whether a GPU is visible, the intra-op thread count, and the CPU kernels'
    instruction-set level: ``cpu_isa`` (in use), ``cpu_isa_host`` (what this CPU supports) and
    ``cpu_isa_cap`` (``FK_CPU_ISA`` as read at import, ``""`` when unset)."""
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
        f"CPU kernels: {cpu_isa_line(d)}",
    ]
    return "\n".join(lines)


def cpu_isa_line(d: dict) -> str:
    """The CPU level in use and why, e.g. ``avx2 (host: avx2; FK_CPU_ISA=avx512 capped at the host)``."""
    level, host, cap = d["cpu_isa"], d["cpu_isa_host"], d["cpu_isa_cap"]
    if not cap:
        why = "FK_CPU_ISA unset"
    elif cap.strip().lower() == level:
        why = f"FK_CPU_ISA={cap}"
    else:
        why = f"FK_CPU_ISA={cap} is above the host: its {level} runs"
    return f"{level} (host supports {host}; {why})"
