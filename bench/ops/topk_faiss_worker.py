"""faiss peer of bench/ops/topk.py, in its own process so its OpenBLAS kernel choice stays its own.

OpenBLAS reads ``OPENBLAS_CORETYPE`` once, when faiss's bundled copy loads, so the parent starts one
worker per kernel choice (see bench/ops/spread_faiss_worker.py). Line protocol on stdin/stdout:

    load H_PATH W_PATH K   -> "ok"       (float32 [N, d] queries and [p, d] database .npy files)
    time THREADS CLOCK     -> seconds    (one IndexFlatIP search of the k largest inner products; CLOCK:
                                          wall, or cpu = this process's CPU time, for 1 thread)
    idx PATH               -> "ok"       (writes the [N, k] int64 ids of the last search to PATH)
    quit

At start the worker prints ``ready <faiss version> <OpenBLAS core name>``. The index is built once
per ``load`` (outside the timed search): faiss stores its own copy of the database.
"""

from __future__ import annotations

import sys
import time

import faiss
import numpy as np
from spread_faiss_worker import openblas_core


def main() -> None:
    print(f"ready {faiss.__version__} {openblas_core()}", flush=True)
    index, h, k, ids = None, None, 1, None
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "load":
            h = np.load(cmd[1])
            W = np.load(cmd[2], mmap_mode="r")
            index = faiss.IndexFlatIP(W.shape[1])
            index.add(np.ascontiguousarray(W))
            del W
            k = int(cmd[3])
            reply = "ok"
        elif cmd[0] == "time":
            assert index is not None and h is not None
            faiss.omp_set_num_threads(int(cmd[1]))
            clock = time.process_time if len(cmd) > 2 and cmd[2] == "cpu" else time.perf_counter
            t0 = clock()
            _, ids = index.search(h, k)
            reply = repr(clock() - t0)
        elif cmd[0] == "idx":
            np.save(cmd[1], ids)
            reply = "ok"
        else:
            reply = f"error: unknown command {cmd[0]}"
        print(reply, flush=True)


if __name__ == "__main__":
    main()
