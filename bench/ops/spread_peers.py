"""Peers of bench/ops/spread.py: faiss self-search at two OpenBLAS kernel choices, and thread scaling.

``knn_peer_row`` times ``fedkernels.knn_classes`` against faiss-cpu ``IndexFlatL2`` / ``IndexFlatIP``
(k + 1 neighbours, own id dropped: knn_classes never returns a class as its own neighbour) at 1 and 2
threads. faiss runs in worker processes (bench/ops/spread_faiss_worker.py), one per OpenBLAS kernel:
``env`` (the environment as it is; OpenBLAS's own detection where OPENBLAS_CORETYPE is unset) and,
where the CPU has AVX-512, ``SkylakeX`` (its AVX-512 kernels), else ``Haswell`` (its AVX2 + FMA ones;
SkylakeX's would stop on an illegal instruction there). faiss itself loads its fastest SIMD build for
the CPU (its ``get_compile_options()`` is in the note). Calls alternate between our op (in this
process) and the workers; each contender's minimum over ``repeat`` rounds is kept, the worker's time
measured inside the worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import fedkernels
from bench.ops.peers import alternating_min, optional_peer

WORKER = Path(__file__).with_name("spread_faiss_worker.py")


def _host_has_avx512() -> bool:
    try:
        return " avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


# column suffix -> OPENBLAS_CORETYPE for the worker: OpenBLAS's own choice, and its fastest kernel family
# this CPU can run (forcing SkylakeX on a CPU without AVX-512 would stop on an illegal instruction).
CORETYPES = {"env": None, "skx": "SkylakeX"} if _host_has_avx512() else {"env": None, "hsw": "Haswell"}


class FaissPeer:
    """A faiss worker process whose OpenBLAS uses ``coretype`` (None: this process's environment)."""

    def __init__(self, coretype: str | None) -> None:
        env = dict(os.environ)
        if coretype is not None:
            env["OPENBLAS_CORETYPE"] = coretype
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        _, self.version, self.core, self.simd = self._reply().split(maxsplit=3)
        self.times: list[float] = []

    def _reply(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line or line.startswith("error"):
            raise RuntimeError(f"faiss worker failed: {line or 'no reply'}")
        return line

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def timed_search(self, threads: int, cpu: bool = False) -> None:
        self.times.append(float(self.ask(f"time {threads}" + (" cpu" if cpu else ""))))

    def close(self) -> None:
        if self.proc.poll() is None:  # "quit" has no reply
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)


def start_faiss_peers() -> tuple[dict[str, FaissPeer], str]:
    """One worker per kernel choice: ``({suffix: peer}, note)``; no workers and why, without faiss."""
    faiss, why = optional_peer("faiss")
    if faiss is None:
        return {}, why
    peers = {name: FaissPeer(core) for name, core in CORETYPES.items()}
    note = ", ".join(f"faiss_{n}: faiss-cpu {p.version} ({p.simd}), OpenBLAS core {p.core}" for n, p in peers.items())
    return peers, note


def same_neighbours(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of rows whose neighbour id sets agree (order ignored: near-ties may swap ranks)."""
    return (a.sort(1).values == b.sort(1).values).all(1).float().mean().item()


def knn_peer_row(
    W: torch.Tensor,
    k: int,
    metric: str,
    peers: dict[str, FaissPeer],
    threads: tuple[int, ...] = (1, 2),
    repeat: int = 5,
    cpu_time: bool = False,
) -> dict:
    """Ours vs each faiss build at each thread count; ratios are faiss time / our time (> 1: ours faster).

    cpu_time: time both sides by their thread's CPU time (one thread only): on a loaded machine the wall
    time of a call counts the slices other processes take, the CPU time does not.
    """
    if cpu_time and any(t != 1 for t in threads):
        raise ValueError("cpu_time measures one thread: threads must be (1,)")
    row: dict = {"C": W.shape[0], "d": W.shape[1], "metric": metric, "k": k, "load_avg_1min": os.getloadavg()[0]}
    row["clock"] = "thread CPU time" if cpu_time else "wall"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.npy"
        np.save(path, W.numpy())
        for peer in peers.values():
            peer.ask(f"load {path} {metric}")
        _, ours = fedkernels.knn_classes(W, k, metric)
        for name, peer in peers.items():
            peer.ask(f"idx 1 {path.with_suffix('.ids.npy')}")
            row[f"same_neighbours_faiss_{name}"] = same_neighbours(
                ours, torch.from_numpy(np.load(path.with_suffix(".ids.npy")))
            )
    before = torch.get_num_threads()
    try:
        for t in threads:
            torch.set_num_threads(t)
            fns = {"fk": lambda: fedkernels.knn_classes(W, k, metric)}
            for name, peer in peers.items():
                peer.times = []
                fns[name] = lambda peer=peer, t=t: peer.timed_search(t, cpu_time)
            best = alternating_min(fns, repeat=repeat, clock=time.thread_time if cpu_time else time.perf_counter)
            row[f"fk_t{t}_s"] = best["fk"]
            for name, peer in peers.items():
                row[f"faiss_{name}_t{t}_s"] = min(peer.times[-repeat:])  # the worker's own clock, no pipe
            if peers:
                row[f"faiss_best_t{t}_s"] = min(row[f"faiss_{n}_t{t}_s"] for n in peers)
                row[f"vs_faiss_best_t{t}"] = row[f"faiss_best_t{t}_s"] / row[f"fk_t{t}_s"]
    finally:
        torch.set_num_threads(before)
    lo, hi = threads[0], threads[-1]
    if hi != lo:
        row["fk_thread_speedup"] = row[f"fk_t{lo}_s"] / row[f"fk_t{hi}_s"]
        for name in peers:
            row[f"faiss_{name}_thread_speedup"] = row[f"faiss_{name}_t{lo}_s"] / row[f"faiss_{name}_t{hi}_s"]
    return row
