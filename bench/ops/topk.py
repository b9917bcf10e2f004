"""Fused linear top-k benchmark: fedkernels.linear_topk against the compositions a user would write and faiss.

Same run, same inputs (h, W ~ N(0, 1) float32, seeded), k = 5, at p in {131073, 312330, 670091}
(LF-AmazonTitles-131K, LF-WikiSeeAlsoTitles-320K, Amazon-670K), d in {128, 512}, N in {256, 4096},
1 and 2 threads. Contenders, calls alternated, the minimum of --repeat (>= 5) each:

- ``fk``: ``fedkernels.linear_topk(h, W, k=k)``: extra memory O(N k + one tile).
- ``eager``: ``torch.topk(h @ W.T, k)``. The whole ``[N, p]`` score matrix needs N p 4 bytes (up to
  11 GB at N = 4096, p = 670091: more than this shared machine can give one process), so the
  composition runs in row batches of at most EAGER_BYTES of scores (the batch is in the row); its
  memory column is the batch's.
- ``compiled``: ``torch.compile`` of the same composition (per batch shape, compiled before timing).
- ``faiss_<core>``: faiss-cpu ``IndexFlatIP.search`` (BLAS inner products + a heap per query) in a
  worker process per OpenBLAS kernel choice this CPU can run (bench/ops/topk_faiss_worker.py; the index
  built outside the timed search). ``faiss_best`` is the faster.
- ``blas_tiles``: only the GEMM of a BLAS-tile design (``torch.mm`` of h against W in the tiles
  linear_topk uses, MKL, no selection): a lower bound on what at::mm tiles plus a fused top-k could do.

The ratios are contender time / fk time (> 1: fk faster), all from the same run. At 1 thread every
contender is timed by the CPU time of the thread (the faiss worker: of its process) that does all
the work, so the slices other processes take on this shared machine are left out (--clock wall
times wall clock); at 2 threads by wall clock. Peak memory is the process's resident-set peak
above its level before the call (bench/common.py peak_extra_bytes), at 1 thread. This machine is an
AMD EPYC with AVX2+FMA (no AVX-512), 2 cores shared with other work: its load average is recorded
with every row.

    PYTHONPATH=src python -m bench.ops.topk             # the full grid (long: run it in the background)
    PYTHONPATH=src python -m bench.ops.topk --quick     # seconds: p = 16384, d = 64, N = 64
    PYTHONPATH=src python -m bench.ops.topk --only 312330,128,256
    PYTHONPATH=src python -m bench.ops.topk --quick --device cuda   # on a GPU (gpu-check): fk, eager, compiled

On CUDA the threads loop is one pass (columns ``_t1``, wall clock), and the CPU peers (faiss,
blas_tiles) are left out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import fedkernels
from bench import common
from bench.ops.peers import alternating_min, compiled_peer, fresh_compiles, optional_peer
from bench.ops.spread_peers import FaissPeer

K = 5
FULL = [(p, d, n) for p in (131073, 312330, 670091) for d in (128, 512) for n in (256, 4096)]
QUICK = [(16384, 64, 64)]
EAGER_BYTES = 1 << 30  # the eager composition's score batch: at most 1 GiB of float32
WORKER = Path(__file__).with_name("topk_faiss_worker.py")
# OpenBLAS kernel families worth trying, with the CPU flag each needs ("env": OpenBLAS's own detection)
CORETYPES = {"env": (None, None), "haswell": ("Haswell", "avx2"), "skx": ("SkylakeX", "avx512f")}


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


class TopkFaissPeer(FaissPeer):
    """bench/ops/spread_peers.py's worker process, running bench/ops/topk_faiss_worker.py."""

    def timed_search(self, threads: int, clock: str = "wall") -> None:  # type: ignore[override]
        self.times.append(float(self.ask(f"time {threads} {clock}")))

    def __init__(self, coretype: str | None) -> None:
        env = dict(os.environ)
        if coretype is not None:
            env["OPENBLAS_CORETYPE"] = coretype
        here = str(Path(__file__).resolve().parent)
        env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        _, self.version, self.core = self._reply().split()
        self.times: list[float] = []


def start_faiss(only: list[str] | None = None) -> tuple[dict[str, TopkFaissPeer], str]:
    """One worker per distinct OpenBLAS kernel this CPU runs (``only``: these names of CORETYPES):
    ``({name: peer}, note)``."""
    faiss, why = optional_peer("faiss")
    if faiss is None:
        return {}, why
    flags, peers, cores = cpu_flags(), {}, set()
    for name, (core, flag) in CORETYPES.items():
        if (flag is not None and flag not in flags) or (only and name not in only):
            continue
        peer = TopkFaissPeer(core)
        if peer.core in cores:  # the same kernels as a worker already started
            peer.close()
            continue
        cores.add(peer.core)
        peers[name] = peer
    note = ", ".join(f"faiss_{n}: faiss-cpu {p.version}, OpenBLAS core {p.core}" for n, p in peers.items())
    return peers, note


def eager_topk(h: torch.Tensor, W: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk(h @ W.T, K)`` in row batches of ``batch``."""
    parts = [torch.topk(h[i : i + batch] @ W.T, K, dim=1) for i in range(0, h.shape[0], batch)]
    return torch.cat([v for v, _ in parts]), torch.cat([i for _, i in parts])


def blas_tiles(h: torch.Tensor, W: torch.Tensor, tile: int) -> None:
    """The GEMM of a BLAS-tile design alone: ``h @ W[tile].T`` per tile, results dropped."""
    for j in range(0, W.shape[0], tile):
        torch.mm(h, W[j : j + tile].T)


def fk_tile_cols(d: int) -> int:
    """linear_topk's CPU tile width for d (csrc/topk/linear_topk_cpu.cpp tile_cols)."""
    return min(max((65536 // max(d, 1)) // 16 * 16, 16), 4096)


def same_sets(a: torch.Tensor, b: torch.Tensor) -> float:
    """Fraction of rows whose top-k id sets agree (random float data: near-ties are rare)."""
    return (a.sort(1).values == b.sort(1).values).all(1).float().mean().item()


def run_config(
    p: int,
    d: int,
    n: int,
    threads: tuple[int, ...],
    repeat: int,
    peers: dict,
    cpu_clock: bool,
    blas: bool,
    device: str = "cpu",
    warmup: int = 1,
) -> dict:
    g = torch.Generator().manual_seed(p + d + n)
    h, W = torch.randn(n, d, generator=g).to(device), torch.randn(p, d, generator=g).to(device)
    batch = n
    while batch > 64 and batch * p * 4 > EAGER_BYTES:
        batch //= 2
    row: dict = {"p": p, "d": d, "N": n, "k": K, "eager_batch_rows": batch}
    row["clock_t1"] = "thread CPU time" if cpu_clock else "wall"
    fresh_compiles()
    compiled, why = compiled_peer(lambda hb, Wt: torch.topk(hb @ Wt.T, K, dim=1), h[:batch], W)
    row["compiled_status"] = why
    _, ours = fedkernels.linear_topk(h, W, k=K)
    row["same_sets_eager"] = same_sets(ours, eager_topk(h, W, batch)[1])
    if device != "cpu":
        threads, cpu_clock, blas = (1,), False, False
    with tempfile.TemporaryDirectory() as tmp:  # the faiss workers' inputs (CPU tensors: peers only run there)
        hp, wp = Path(tmp) / "h.npy", Path(tmp) / "w.npy"
        if peers:
            np.save(hp, h.numpy())
            np.save(wp, W.numpy())
        for peer in peers.values():
            peer.ask(f"load {hp} {wp} {K}")
        if peers:
            wp.unlink()  # the workers hold their own copies now
        for name, peer in peers.items():
            peer.timed_search(1)
            peer.ask(f"idx {Path(tmp) / 'ids.npy'}")
            row[f"same_sets_faiss_{name}"] = same_sets(ours, torch.from_numpy(np.load(Path(tmp) / "ids.npy")))
    before = torch.get_num_threads()
    try:
        for t in threads:
            torch.set_num_threads(t)
            cpu = cpu_clock and t == 1
            fns = {
                "fk": lambda: fedkernels.linear_topk(h, W, k=K),
                "eager": lambda: eager_topk(h, W, batch),
            }
            if compiled is not None:
                fns["compiled"] = lambda: [compiled(h[i : i + batch], W) for i in range(0, n, batch)]
            for name, peer in peers.items():
                peer.times = []
                fns[f"faiss_{name}"] = lambda peer=peer, t=t, cpu=cpu: peer.timed_search(t, "cpu" if cpu else "wall")
            if blas and t == threads[0]:
                fns["blas_tiles"] = lambda: blas_tiles(h, W, fk_tile_cols(d))
            clock = time.thread_time if cpu else time.perf_counter
            best = alternating_min(fns, repeat=repeat, warmup=warmup, clock=clock)
            for name in fns:
                if name.startswith("faiss_"):
                    best[name] = min(peers[name[len("faiss_") :]].times[-repeat:])  # the worker's own clock
                row[f"{name}_t{t}_s"] = best[name]
            row[f"fk_t{t}_gflops"] = 2 * n * p * d / best["fk"] / 1e9
            for name in fns:
                if name != "fk":
                    row[f"{name}_vs_fk_t{t}"] = best[name] / best["fk"]
            if peers:
                fb = min(best[f"faiss_{x}"] for x in peers)
                row[f"faiss_best_t{t}_s"] = fb
                row[f"faiss_best_vs_fk_t{t}"] = fb / best["fk"]
        torch.set_num_threads(1)
        row["fk_peak_MiB"] = common.mib(common.peak_extra_bytes(lambda: fedkernels.linear_topk(h, W, k=K), device))
        row["eager_peak_MiB"] = common.mib(common.peak_extra_bytes(lambda: eager_topk(h, W, batch), device))
        row["eager_whole_MiB"] = common.mib(n * p * 4)  # the unbatched composition's score matrix alone
        row["fk_bound_MiB"] = common.mib(n * K * 12 + n * d * 4 + fk_tile_cols(d) * d * 4)
    finally:
        torch.set_num_threads(before)
    row["load_avg_1min"] = os.getloadavg()[0]
    return row


COLUMNS = [
    "p",
    "d",
    "N",
    "fk_t1_s",
    "fk_t1_gflops",
    "eager_vs_fk_t1",
    "compiled_vs_fk_t1",
    "faiss_best_vs_fk_t1",
    "blas_tiles_vs_fk_t1",
    "fk_t2_s",
    "eager_vs_fk_t2",
    "compiled_vs_fk_t2",
    "faiss_best_vs_fk_t2",
    "fk_peak_MiB",
    "eager_peak_MiB",
    "eager_whole_MiB",
    "load_avg_1min",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one small configuration (seconds)")
    ap.add_argument("--only", help="one configuration p,d,N")
    ap.add_argument("--ns", type=int, nargs="+", help="only the configurations with these N")
    ap.add_argument("--faiss-cores", nargs="+", choices=sorted(CORETYPES), help="only these faiss builds")
    ap.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed calls per contender first (0: the compiled peer and faiss's "
        "index are ready before timing anyway)",
    )
    ap.add_argument("--repeat", type=int, default=5, help="alternated calls per contender (>= 5)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="the 1-thread clock (see above)")
    ap.add_argument(
        "--blas-p", type=int, nargs="*", default=[131073, 16384], help="the p at which blas_tiles is timed (1 thread)"
    )
    common.add_device_arguments(ap)
    args = ap.parse_args()
    device = common.check_device_arguments(ap, args)
    configs = QUICK if args.quick else FULL
    if args.only:
        configs = [tuple(int(x) for x in args.only.split(","))]  # type: ignore[misc]
    if args.ns:
        configs = [c for c in configs if c[2] in args.ns]
    peers, note = start_faiss(args.faiss_cores) if device == "cpu" else ({}, "faiss: CPU only, not run on " + device)
    print(f"peers: {note}", flush=True)
    rows = []
    t0 = time.perf_counter()
    try:
        for p, d, n in configs:
            rows.append(
                run_config(
                    p,
                    d,
                    n,
                    tuple(args.threads),
                    args.repeat,
                    peers,
                    args.clock == "cpu",
                    p in args.blas_p,
                    device,
                    args.warmup,
                )
            )
            print(common.markdown_table(rows[-1:], COLUMNS), flush=True)
    finally:
        for peer in peers.values():
            peer.close()
    path = common.write_results(
        "topk",
        rows,
        {"faiss": note, "note": common.load_note(), "seconds": time.perf_counter() - t0},
        common.results_path("topk", device, args.out, args.quick),
        device,
    )
    print(common.markdown_table(rows, COLUMNS))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
