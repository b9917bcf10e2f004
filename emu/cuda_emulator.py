"""Run fedkernels' CUDA kernels on the CPU: the Python side of the CUDA execution emulator.

The emulated module (``_C_emu``, built by ``python emu/emulate.py build``) holds every CUDA
launcher and kernel of the project, compiled for the host and registered under the CUDA dispatch
key exactly as a real CUDA build registers them. Host tensors never dispatch there by themselves:
:func:`route_ops_to_cuda` installs, for every ``torch.ops.fedkernels`` op, a CPU kernel that
re-dispatches the call to the op's CUDA kernel, so the launcher runs its checks and host code on
the host tensors and its kernels run in the emulator. Removing the routing restores the CPU kernels.

    from emu import cuda_emulator as emu
    emu.load()                                   # path from $FK_CUDA_EMU_MODULE
    with emu.routed_to_cuda():
        fedkernels.label_hash(indptr, indices, table, 4000)   # runs label_hash_kernel, emulated
    with emu.recording(execute=False) as launches:
        fedkernels.knn_classes(W, 10)            # records the launch shapes, runs no kernel body
    launches  # [("knn_scan_kernel", (grid...), (block...)), ...]

See docs/emulator.md for what it models and what only a GPU can show.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

import fedkernels  # noqa: F401  (the op schemas must exist before the emulated kernels register)

__all__ = ["LaunchRecord", "load", "loaded", "recording", "route_ops_to_cuda", "routed_to_cuda"]

LaunchRecord = tuple[str, tuple[int, int, int], tuple[int, int, int]]

_MODULE: ModuleType | None = None


def load(path: str | os.PathLike[str] | None = None) -> ModuleType:
    """Import the emulated module (``$FK_CUDA_EMU_MODULE`` by default); idempotent."""
    global _MODULE
    if _MODULE is not None:
        return _MODULE
    path = path or os.environ.get("FK_CUDA_EMU_MODULE")
    if not path:
        raise RuntimeError(
            "no emulated CUDA module: build one with `python emu/emulate.py build` and set "
            "FK_CUDA_EMU_MODULE to the path it prints"
        )
    if not Path(path).is_file():
        raise FileNotFoundError(f"emulated CUDA module not found: {path}")
    spec = importlib.util.spec_from_file_location("fedkernels._C_emu", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["fedkernels._C_emu"] = module
    _MODULE = module
    return module


def loaded() -> ModuleType:
    """The emulated module; raises if :func:`load` has not run."""
    if _MODULE is None:
        raise RuntimeError("the CUDA emulator is not loaded (emu.cuda_emulator.load)")
    return _MODULE


def _fedkernels_ops() -> list[str]:
    return sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("fedkernels::"))


def _redispatch(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    return op.redispatch(torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA), *args, **kwargs)


def route_ops_to_cuda() -> torch.library.Library:
    """Send every fedkernels op called on host tensors to its (emulated) CUDA kernel.

    Returns the ``torch.library.Library`` holding the routing; ``lib._destroy()`` removes it.
    An op with neither a CUDA kernel nor a composite implementation is an error: nothing falls
    back to the CPU kernel silently.
    """
    loaded()
    lib = torch.library.Library("fedkernels", "IMPL")
    missing = []
    for qualname in _fedkernels_ops():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CUDA"):
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CompositeImplicitAutograd"):
                continue  # decomposes into routed ops
            missing.append(qualname)
            continue
        name, _, overload = qualname.split("::", 1)[1].partition(".")
        op = getattr(getattr(torch.ops.fedkernels, name), overload or "default")
        with warnings.catch_warnings():  # "Overriding a previously registered kernel": intended here
            warnings.simplefilter("ignore")
            lib.impl(qualname.split("::", 1)[1], functools.partial(_redispatch, op), "CPU")
    if missing:
        lib._destroy()
        raise RuntimeError(f"no CUDA kernel in the emulated module for: {', '.join(missing)}")
    return lib


@contextlib.contextmanager
def routed_to_cuda() -> Iterator[None]:
    """Within the block, fedkernels ops on host tensors run their emulated CUDA kernels."""
    lib = route_ops_to_cuda()
    try:
        yield
    finally:
        lib._destroy()


@contextlib.contextmanager
def recording(execute: bool = True) -> Iterator[list[LaunchRecord]]:
    """Record every kernel launch in the block as ``(kernel, grid, block)``.

    ``execute=False`` checks and records each launch but runs no kernel body (outputs are left
    as allocated), for launch shapes at sizes the emulator would take long to run.
    """
    m = loaded()
    out: list[LaunchRecord] = []
    m.start_recording()
    m.set_execute(execute)
    try:
        yield out
    finally:
        m.set_execute(True)
        out.extend(m.stop_recording())
