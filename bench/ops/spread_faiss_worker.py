"""faiss peer of bench/ops/spread.py, in its own process so each OpenBLAS kernel choice stays the peer's.

OpenBLAS reads ``OPENBLAS_CORETYPE`` once, when faiss's bundled copy loads, so the parent starts one
worker per kernel choice with that environment; fedkernels never runs under it. Line protocol on
stdin/stdout (one reply line per command):

    load PATH METRIC   -> "ok"       (PATH: a float32 [C, d] .npy; METRIC: l2 | cosine)
    time THREADS [cpu] -> seconds    (one self-search at that many OpenMP threads, index build included;
                                      wall time, or with ``cpu`` this thread's CPU time: one thread only)
    idx THREADS PATH   -> "ok"       (writes the [C, k] int64 neighbour ids to PATH)
    quit

At start the worker prints ``ready <faiss version> <OpenBLAS core name> <faiss compile options>`` (the
options name the SIMD build faiss loaded for this CPU, e.g. ``OPTIMIZE DD AVX2``).

Self-search semantics match ``knn_classes``: a class is never its own neighbour, so faiss is asked for
k + 1 neighbours and each row drops its own id (or its last column where a tie pushed itself out).
"""

from __future__ import annotations

import ctypes
import sys
import time

import faiss
import numpy as np

K = 10


def openblas_core() -> str:
    """The kernel family faiss's bundled OpenBLAS chose (``openblas_get_corename``), or why unknown."""
    with open("/proc/self/maps") as maps:
        paths = [line.split()[-1] for line in maps]
    for path in paths:
        if "openblas" in path.lower():
            try:
                fn = ctypes.CDLL(path).openblas_get_corename
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_char_p
            return fn().decode()
    return "unknown"


def self_search(X: np.ndarray, metric: str, k: int = K) -> np.ndarray:
    """[C, k] ids of each row's k nearest other rows (l2, or cosine as inner product of unit rows)."""
    if metric == "cosine":
        X = X.copy()
        faiss.normalize_L2(X)
        index = faiss.IndexFlatIP(X.shape[1])
    else:
        index = faiss.IndexFlatL2(X.shape[1])
    index.add(X)
    _, ids = index.search(X, k + 1)
    own = ids == np.arange(len(X))[:, None]
    own[~own.any(1), -1] = True  # rows whose own id fell out of the k + 1: drop the last column
    return ids[~own].reshape(len(X), k)


def main() -> None:
    simd = " ".join(faiss.get_compile_options().split()) or "unknown"
    print(f"ready {faiss.__version__} {openblas_core()} {simd}", flush=True)
    X, metric = None, "l2"
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "load":
            X, metric = np.load(cmd[1]), cmd[2]
            reply = "ok"
        elif cmd[0] == "time":
            faiss.omp_set_num_threads(int(cmd[1]))
            clock = time.thread_time if cmd[2:] == ["cpu"] else time.perf_counter
            t0 = clock()
            self_search(X, metric)
            reply = repr(clock() - t0)
        elif cmd[0] == "idx":
            faiss.omp_set_num_threads(int(cmd[1]))
            np.save(cmd[2], self_search(X, metric))
            reply = "ok"
        else:
            reply = f"error: unknown command {cmd[0]}"
        print(reply, flush=True)


if __name__ == "__main__":
    main()
