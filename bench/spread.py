"""Spreadout benchmark: fedkernels knn_classes / spreadout_loss against torch.cdist + topk + hinge.

Same run, same inputs: C in {1000, 20000, 100000}, d in {64, 512}, k = 10. The composition
materialises the [C, C] distance matrix (and its gradient), so at C = 100000 it would need
C^2 * 4 bytes = 40 GB for the forward alone: it is not run there, its memory is reported analytically.

    PYTHONPATH=src python bench/spread.py            # full (C = 100000, d = 512 takes several minutes)
    PYTHONPATH=src python bench/spread.py --quick    # skips C = 100000
    PYTHONPATH=src python bench/spread.py --only 20000,512 --append   # one configuration
    PYTHONPATH=src python bench/spread.py --quick --device cuda        # on a GPU: gpu-check/bench/spread.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

import fedkernels
from common import (add_device_arguments, check_device_arguments, copy_bandwidth_gbs, markdown_table, mib,
                    peak_extra_bytes, results_path, sync, timeit, write_results)

K = 10
MARGIN = 1.0


def composition_knn(W: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What a user writes: the full distance matrix, self masked, then topk."""
    D = torch.cdist(W, W)
    D.fill_diagonal_(float("inf"))
    return D.topk(k, dim=1, largest=False)


def composition_loss_fwd_bwd(W: torch.Tensor, k: int) -> torch.Tensor:
    W = W.detach().requires_grad_(True)
    D = torch.cdist(W, W)
    D = D + torch.diag(torch.full((W.shape[0],), float("inf"), dtype=W.dtype, device=W.device))
    vals, _ = D.topk(k, dim=1, largest=False)
    loss = (torch.clamp(MARGIN - vals, min=0) ** 2).sum()
    loss.backward()
    return W.grad


def fused_loss_fwd_bwd(W: torch.Tensor, k: int) -> torch.Tensor:
    W = W.detach().requires_grad_(True)
    fedkernels.spreadout_loss(W, MARGIN, k).backward()
    return W.grad


def once(fn, device: str = "cpu") -> tuple[float, int]:
    """Wall time and peak extra memory of a single call (for the configurations too slow to repeat)."""
    t = [0.0]

    def run():
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        t[0] = time.perf_counter() - t0
        return out
    peak = peak_extra_bytes(run, device)
    return t[0], peak


def measure(fn, repeat: int, device: str = "cpu") -> tuple[float, int]:
    if repeat <= 1:
        return once(fn, device)
    return timeit(fn, device, warmup=1, repeat=repeat, min_time=0.0), peak_extra_bytes(fn, device)


def bench_config(c: int, d: int, run_composition: bool, repeat: int, device: str = "cpu") -> dict:
    """One (C, d) row: W drawn on the CPU (same values on every device), then moved to ``device``."""
    g = torch.Generator().manual_seed(0)
    W = (torch.randn(c, d, generator=g) / d**0.5).to(device)
    row: dict = {"C": c, "d": d, "k": K, "load_avg_1min": os.getloadavg()[0]}
    t_knn, m_knn = measure(lambda: fedkernels.knn_classes(W, K), repeat, device)
    t_loss, m_loss = measure(lambda: fused_loss_fwd_bwd(W, K), repeat, device)
    row.update(fk_knn_s=t_knn, fk_knn_peak_mib=mib(m_knn), fk_loss_fwd_bwd_s=t_loss, fk_loss_peak_mib=mib(m_loss),
               fk_knn_gflops=2 * c * c * d / t_knn / 1e9,
               # compute-bound: the minimum traffic (read W, write dist+idx) is tiny against copy bandwidth
               fk_knn_gbs=(c * d * 4 + c * K * 12) / t_knn / 1e9)
    if run_composition:
        t_cknn, m_cknn = measure(lambda: composition_knn(W, K), repeat, device)
        t_closs, m_closs = measure(lambda: composition_loss_fwd_bwd(W, K), repeat, device)
        # same answer check: the neighbour sets of both paths agree
        _, idx_fk = fedkernels.knn_classes(W, K)
        _, idx_ref = composition_knn(W, K)
        agree = (idx_fk.sort(1).values == idx_ref.sort(1).values).all(1).float().mean().item()
        row.update(torch_knn_s=t_cknn, torch_knn_peak_mib=mib(m_cknn), torch_loss_fwd_bwd_s=t_closs,
                   torch_loss_peak_mib=mib(m_closs), knn_speedup=t_cknn / t_knn, loss_speedup=t_closs / t_loss,
                   rows_same_neighbours=agree, composition="run")
    else:
        row.update(composition="not run (needs >= %.0f GB for the [C, C] matrix)" % (c * c * 4 / 1e9),
                   torch_knn_peak_mib=mib(c * c * 4), torch_loss_peak_mib=mib(3 * c * c * 4))
    return row


def knn_tile_path() -> str:
    """Which CPU tile path knn_classes takes here (float32): fused AVX-512 tiles or BLAS tiles."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    fused = " avx512f" in flags and "FEDKERNELS_KNN_BLAS" not in os.environ
    return "fused AVX-512 register tiles" if fused else "BLAS (MKL sgemm) tiles"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip C = 100000")
    ap.add_argument("--only", nargs="*", metavar="C,d", help="run just these configurations, e.g. 20000,512")
    ap.add_argument("--append", action="store_true", help="merge into the existing result file")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    add_device_arguments(ap)
    args = ap.parse_args()
    device = check_device_arguments(ap, args)
    on_cpu = torch.device(device).type == "cpu"
    out = results_path("spread", device, args.out)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [1000, 20000] + ([] if args.quick else [100000])
    configs = [(c, d) for c in sizes for d in (64, 512)]
    if args.only:
        configs = [tuple(int(v) for v in item.split(",")) for item in args.only]
    previous = {}
    if args.append and out.exists():
        previous = {(r["C"], r["d"]): r for r in json.loads(out.read_text())["rows"]}
    for c, d in configs:
        # one timed run per configuration from C = 20000 on: they take minutes on 2 shared cores
        # (a GPU repeats every configuration: a single call would time its first-launch costs)
        repeat = 5 if c <= 1000 or not on_cpu else 1
        row = bench_config(c, d, run_composition=c <= 20000, repeat=repeat, device=device)
        print(row, flush=True)
        previous[(c, d)] = row
    rows = [previous[key] for key in sorted(previous)]
    extra = {"copy_bandwidth_gbs": copy_bandwidth_gbs(device), "k": K, "margin": MARGIN,
             "knn_tile_path": knn_tile_path() if on_cpu else f"{device} kernels",
             "load_avg_end": os.getloadavg(),
             "note": "machine shared with other engineers' builds/tests; compare ratios within this run"}
    path = write_results("spread", rows, extra, path=out, device=device)
    cols = ["C", "d", "fk_knn_s", "torch_knn_s", "knn_speedup", "fk_knn_peak_mib", "torch_knn_peak_mib",
            "fk_loss_fwd_bwd_s", "torch_loss_fwd_bwd_s", "loss_speedup", "fk_loss_peak_mib", "torch_loss_peak_mib",
            "fk_knn_gflops", "load_avg_1min", "composition"]
    print(markdown_table(rows, cols))
    print(f"knn tile path: {extra['knn_tile_path']}; copy bandwidth {extra['copy_bandwidth_gbs']:.1f} GB/s; "
          f"results in {path}")


if __name__ == "__main__":
    main()
