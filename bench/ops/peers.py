"""Peers: what a user would pick instead of a fedkernels op, timed in the same run as the op.

Peers are bench-only extras (``make bench-peers`` installs them into .venv), never runtime
dependencies. A peer that is not installed, or fails to build, gives a row that says why instead of
a number, so every table keeps its peer column.

Timing rule for op-vs-peer comparisons: one process, calls alternated between the contenders, the
minimum of ``repeat`` (at least 5) per contender, so a slow minute of the shared VM hits all of them.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from types import ModuleType

import torch

# A bench's sweep of shapes and grad modes recompiles one peer many times; room for that sweep.
RECOMPILE_LIMIT = 64

# import name -> what to install (pip name, and any system package it needs to build)
INSTALL_HINTS = {
    "faiss": "pip install faiss-cpu",
    "prox_tv": "apt-get install liblapacke-dev && pip install prox-tv",
    "cut_cross_entropy": "pip install cut-cross-entropy",
    "torch_scatter": "pip install --no-build-isolation torch-scatter (builds against the installed torch)",
}


def optional_peer(module: str) -> tuple[ModuleType | None, str]:
    """Import a peer library: ``(module, version)``, or ``(None, why it is missing)``."""
    try:
        mod = importlib.import_module(module)
    except Exception as e:  # any import failure (missing, ABI mismatch) means "no peer"
        hint = INSTALL_HINTS.get(module, f"pip install {module}")
        return None, f"{module} not importable ({type(e).__name__}: {e}); install: {hint}"
    return mod, str(getattr(mod, "__version__", "unknown version"))


def compiled_peer(fn: Callable[..., object], *args: object, **compile_kwargs: object) -> tuple[Callable | None, str]:
    """``torch.compile(fn)`` warmed up on ``args``: ``(compiled, "ok")`` or ``(None, why it failed)``.

    The compile (and its autotuning) happens here, outside any timed region. Benches that sweep
    shapes call ``fresh_compiles()`` per configuration, so each peer is compiled for its shapes as a
    user's first call would be (not as dynamo's dynamic-shape recompile). ``FK_BENCH_NO_COMPILE=1``
    skips it (``(None, why)``): a short GPU check (``gpu_check.py --no-compile-peers``) cannot wait for
    inductor's Triton compiles.
    """
    if os.environ.get("FK_BENCH_NO_COMPILE") == "1":
        return None, "torch.compile skipped: FK_BENCH_NO_COMPILE=1"
    # dynamo compiles a function again for each new shape or grad mode, at most recompile_limit (8)
    # times per code object, and then runs it eagerly without a word: a bench sweeping shapes would
    # time eager code under the name "torch.compile". Make that an error instead (for this process).
    import torch._dynamo  # here, not at import: a bench that stops at its arguments should not load dynamo

    torch._dynamo.config.fail_on_recompile_limit_hit = True
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    try:
        cfn = torch.compile(fn, **compile_kwargs)  # type: ignore[arg-type]
        for _ in range(2):
            cfn(*args)
    except Exception as e:  # inductor failures of any kind mean "no compiled peer"
        return None, f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    return cfn, "ok"


def fresh_compiles() -> None:
    """Forget every compiled graph (``torch._dynamo.reset()``): the next call of a compiled peer,
    cut-cross-entropy's included, compiles anew for the shapes it is given."""
    import torch._dynamo

    torch._dynamo.reset()


def _sync_if_cuda() -> None:
    """Wait for queued GPU work, so a CUDA call is timed to its end (a no-op in a CPU-only process)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def alternating_min(
    fns: dict[str, Callable[[], object]],
    repeat: int = 7,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Minimum time (s) of each callable, calls alternated round-robin, ``repeat`` >= 5 each.

    ``clock`` is wall time by default; ``time.thread_time`` measures only this thread's CPU time, which
    leaves out the slices other processes take on a shared machine (for single-threaded contenders).
    """
    if repeat < 5:
        raise ValueError(f"repeat must be >= 5, got {repeat}")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync_if_cuda()
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = clock()
            fn()
            _sync_if_cuda()
            best[name] = min(best[name], clock() - t0)
    return best


def thread_scaling(fn: Callable[[], object], threads: tuple[int, ...] = (1, 2), repeat: int = 5) -> dict[str, float]:
    """Minimum time of ``fn`` at each torch thread count and the speed-up from the first to the last.

    Returns ``{"t<n>_s": seconds, ..., "speedup": t_first / t_last}``; the thread count is restored.
    """
    before = torch.get_num_threads()
    out: dict[str, float] = {}
    try:
        for n in threads:
            torch.set_num_threads(n)
            out[f"t{n}_s"] = alternating_min({"fn": fn}, repeat=repeat)["fn"]
    finally:
        torch.set_num_threads(before)
    out["speedup"] = out[f"t{threads[0]}_s"] / out[f"t{threads[-1]}_s"]
    return out
