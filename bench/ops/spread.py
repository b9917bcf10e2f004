"""Spreadout benchmark: fedkernels knn_classes / spreadout_loss against torch.cdist + topk + hinge.

Same run, same inputs: C in {1000, 20000, 100000}, d in {64, 512}, k = 10. The composition
materialises the [C, C] distance matrix (and its gradient), so at C = 100000 it would need
C^2 * 4 bytes = 40 GB for the forward alone: it is not run there, its memory is reported analytically.

    PYTHONPATH=src python -m bench.ops.spread            # full (C = 100000, d = 512 takes several minutes)
    PYTHONPATH=src python -m bench.ops.spread --quick    # skips C = 100000
    PYTHONPATH=src python -m bench.ops.spread --only 20000,512 --append   # one configuration
    PYTHONPATH=src python -m bench.ops.spread --quick --device cuda        # on a GPU: gpu-check/bench/spread.json
    PYTHONPATH=src python -m bench.ops.spread --cuda-model   # the CUDA launch table below, and exit

Peers (CPU, C <= 20000): torch.compile of the cdist + topk composition and of the loss's composition
(calls alternated with ours and the eager composition, minimum of 5 each), and faiss-cpu self-search
(IndexFlatL2 / IndexFlatIP, k + 1 neighbours with the own id dropped) under two OpenBLAS kernel choices,
each in its own worker process (bench/ops/spread_peers.py), at 1 and 2 threads, l2 and cosine: the
"vs_faiss_best" columns divide the faster faiss build's time by ours. --skip-peers leaves them out;
--peers-only runs just them (with --append, keeping the file's other rows).

CUDA kernels on an H100 (132 SMs, 3.35 TB/s, 67 TFLOP/s FP32 and 34 TFLOP/s FP64 on CUDA cores), C =
100000, k = 10, analytic (cuda_launch_model; no GPU has run them). warps/SM: warps one launch puts on
each SM; resident: warps an SM holds at once given the registers ptxas reports for sm_90 (PTXAS_REGS);
waves = warps/SM / resident. MB: unavoidable DRAM traffic; us: that at 3.35 TB/s, or at the FLOP peak
where that is longer (the GEMM). knn_classes:

| kernel | launches | blocks x threads | warps/SM | resident | waves | d=64: MB / us | d=512: MB / us | bound |
|---|---|---|---|---|---|---|---|---|
| row_norms_kernel (block per 128 rows, smem-staged) | 1 | 782 x 128 | 23.7 | 24 | 0.99 | 26 / 8 | 206 / 61 | memory |
| at::mm = cuBLAS sgemm, 10 x 13 tiles of [10240, d] x [d, 8192] | 130 | cuBLAS | - | - | - | 40613 / 12123; 1.28 TFLOP: 19105 | 44907 / 13405; 10.2 TFLOP: 152836 | compute |
| knn_tile_merge_kernel (warp per row of a tile) | 130 | 1280 x 256 | 77.6 | 40 | 1.94 | 40281 / 12024 (reads G) | 40281 / 12024 | memory |
| knn_finalize_kernel (warp per row) | 1 | 12500 x 256 | 758 | 24 | 31.6 | 542 / 162 | 3946 / 1178 | memory |

spreadout_loss forward + backward (FedAwS, l2):

| kernel | launches | blocks x threads | warps/SM | resident | waves | d=64: MB / us | d=512: MB / us | bound |
|---|---|---|---|---|---|---|---|---|
| pair_weight_gather_kernel (thread per pair; FedALC only) | 1 | 7813 x 128 | 237 | 64 | 3.7 | 28 / 8 | 28 / 8 | memory (latency) |
| pair_terms_kernel (warp per row, lanes over d), fwd and bwd | 2 | 12500 x 256 | 758 | 32 | 23.7 | 302 / 90 each | 2273 / 678 each | memory |
| ordered_sum_kernel (chunks of 1024, then 1 block) | 2 | 98 x 256, 1 x 256 | 5.9 | 64 | 0.09 | 0.8 / 0.2 | 0.8 / 0.2 | launch latency |
| pair_grad_kernel (warp per row, lanes over d) | 1 | 12500 x 256 | 758 | 32 | 23.7 | 595 / 178 | 4538 / 1355 | memory |

So knn_classes is bounded by about 31 ms at d = 64 (the GEMM plus the G round trip, 2 x 40 GB) and
165 ms at d = 512 (the FP32 GEMM), and the loss's own kernels by about 0.5 ms / 3 ms. The GEMM stays on
FP32 CUDA cores: TF32 tensor cores would widen the exactness band 8192-fold (csrc/spread/spread_cuda.cpp).
The row tile of 10240 makes a merge launch 1.94 waves of 40 resident warps per SM (8192: 1.55 waves).
Before this shape, knn ran one thread per row (782 x 128, 23.7 warps/SM, each thread reading its own
row at stride d, the C^2 d multiply-adds on CUDA cores from a 32-column shared tile, the candidate list
serial per thread), finalize one thread per row, the loss sum in 1 block of 128 threads and the
gradient a 128-thread block per row (half idle at d = 64; cosine's projection redone by every thread).
"""  # noqa: E501  (markdown tables of the launch model above: a table row cannot wrap)

from __future__ import annotations

import argparse
import json
import os
import time

import torch

import fedkernels
from bench.common import (
    add_device_arguments,
    check_device_arguments,
    copy_bandwidth_gbs,
    load_note,
    markdown_table,
    mib,
    peak_extra_bytes,
    results_path,
    sync,
    timeit,
    write_results,
)
from bench.ops.peers import alternating_min, compiled_peer, thread_scaling
from bench.ops.spread_peers import knn_peer_row, start_faiss_peers

K = 10
MARGIN = 1.0


# ---- the CUDA kernels' launches on an H100, analytically (no GPU on the build machines) ------------
H100_SMS = 132
H100_HBM_BYTES_S = 3.35e12  # HBM3, SXM
H100_FP32_FLOPS = 67e12  # CUDA cores (cuBLAS sgemm without TF32, which knn_classes needs)
H100_FP64_FLOPS = 34e12  # CUDA cores
KNN_ROW_TILE, KNN_COL_TILE = 10240, 8192  # csrc/spread/spread_cuda.cpp: kRowTile, kColTile (float32)
WARP_BLOCK = 256  # warp-per-row kernels: 8 warps per block


# Registers per thread that ptxas reports for sm_90 (float32 W; nvcc 13.0, -Xptxas=-v), and the warps
# one SM then holds at once (65536 registers, whole blocks; row_norms: 33 KiB of shared memory per block).
PTXAS_REGS = {
    "row_norms_kernel": 29,
    "knn_tile_merge_kernel": 45,
    "knn_finalize_kernel": 72,
    "pair_weight_gather_kernel": 20,
    "pair_terms_kernel": 56,
    "ordered_sum_kernel": 30,
    "pair_grad_kernel": 64,
}


def resident_warps(kernel: str, threads: int) -> int:
    regs = -(-PTXAS_REGS[kernel] // 8) * 8
    warps_per_block = threads // 32
    blocks = min(65536 // (regs * threads), 32, 64 // warps_per_block)
    if kernel == "row_norms_kernel":
        blocks = min(blocks, (228 * 1024) // (33792 + 1024))
    return blocks * warps_per_block


def cuda_launch_model(c: int, d: int, k: int = K) -> list[dict]:
    """Launch shape, bytes and bound time of every CUDA kernel of knn_classes + spreadout_loss fwd/bwd.

    warps/SM is the warps one launch puts on each of the 132 SMs (at most 64 are resident at once;
    more means several waves). bytes is the DRAM traffic the kernel cannot avoid (gathered rows counted
    once per use: at these sizes W does not stay in the 50 MB L2 between uses, except at d = 64 where
    part of it may). Time: bytes at 3.35 TB/s, or FLOPs at the CUDA-core peak where that is larger.
    """
    cap = k + 8
    row_tiles, col_tiles = -(-c // KNN_ROW_TILE), -(-c // KNN_COL_TILE)
    tr, tc = min(KNN_ROW_TILE, c), min(KNN_COL_TILE, c)

    def ceil(a: int, b: int) -> int:
        return -(-a // b)

    rows = []

    def add(kernel, launches, blocks, threads, nbytes, flops=0.0, peak=H100_FP32_FLOPS, note=""):
        warps = blocks * threads // 32
        resident = resident_warps(kernel, threads) if kernel in PTXAS_REGS else 0
        t_bw = nbytes / H100_HBM_BYTES_S
        t_fl = flops / peak if flops else 0.0
        rows.append(
            {
                "kernel": kernel,
                "launches": launches,
                "blocks": blocks,
                "threads": threads,
                "warps/SM": round(warps / H100_SMS, 1),
                "resident": resident,
                "waves": round(warps / (resident * H100_SMS), 2) if resident else "",
                "MB": round(nbytes / 1e6, 1),
                "us@3.35TB/s": round(t_bw * 1e6, 1),
                "GFLOP": round(flops / 1e9, 1),
                "us@peak": round(t_fl * 1e6, 1),
                "bound": "compute" if t_fl > t_bw else "memory",
                "note": note,
            }
        )

    # knn_classes
    add("row_norms_kernel", 1, ceil(c, 128), 128, c * d * 4 + c * 8)
    add(
        "at::mm (cuBLAS sgemm)",
        row_tiles * col_tiles,
        0,
        0,
        c * c * 4 + row_tiles * col_tiles * (tr + tc) * d * 4,
        2.0 * c * c * d,
        note=f"{row_tiles}x{col_tiles} tiles [{tr},{d}]x[{d},{tc}]; writes G",
    )
    add(
        "knn_tile_merge_kernel",
        row_tiles * col_tiles,
        ceil(tr, 8),
        WARP_BLOCK,
        c * c * 4 + col_tiles * c * cap * 12,
        note="per launch: blocks/warps of one tile; bytes: all tiles (reads G)",
    )
    add(
        "knn_finalize_kernel",
        1,
        ceil(c, 8),
        WARP_BLOCK,
        c * (cap + 1) * d * 4 + c * cap * 24 + c * k * 12,
        3.0 * c * cap * d,
        H100_FP64_FLOPS,
        note="float64 recompute of k+8 candidates",
    )
    # spreadout_loss forward + backward (FedAwS: no pair weights, so no gather)
    add("pair_weight_gather_kernel", 1, ceil(c * k, 128), 128, c * k * 28, note="FedALC only; empty CSR")
    add(
        "pair_terms_kernel",
        2,
        ceil(c, 8),
        WARP_BLOCK,
        c * (k + 1) * d * 4 + c * k * 20,
        3.0 * c * k * d,
        H100_FP64_FLOPS,
        note="fwd (row sums) and bwd (coefs): each",
    )
    add("ordered_sum_kernel", 2, ceil(c, 1024), 256, c * 8, note="pass 1; pass 2 is 1 block over the chunk sums")
    add(
        "pair_grad_kernel",
        1,
        ceil(c, 8),
        WARP_BLOCK,
        c * (2 * k + 1) * d * 4 + c * d * 4 + c * k * 32,
        4.0 * c * 2 * k * d,
        H100_FP64_FLOPS,
        note="l2; cosine reads the partners twice",
    )
    for r in rows:
        if r["blocks"] == 0:
            r["blocks"], r["threads"], r["warps/SM"], r["resident"] = "cuBLAS", "", "", ""
    return rows


def composition_knn(W: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What a user writes: the full distance matrix, self masked, then topk."""
    D = torch.cdist(W, W)
    D.fill_diagonal_(float("inf"))
    return D.topk(k, dim=1, largest=False)


def composition_knn_outofplace(W: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """composition_knn for torch.compile, which rejects fill_diagonal_ (a mutation through as_strided)."""
    D = torch.cdist(W, W)
    D = D + torch.diag(torch.full((W.shape[0],), float("inf"), dtype=W.dtype, device=W.device))
    return D.topk(k, dim=1, largest=False)


def composition_loss_fwd_bwd(W: torch.Tensor, k: int) -> torch.Tensor:
    W = W.detach().requires_grad_(True)
    D = torch.cdist(W, W)
    D = D + torch.diag(torch.full((W.shape[0],), float("inf"), dtype=W.dtype, device=W.device))
    vals, _ = D.topk(k, dim=1, largest=False)
    loss = (torch.clamp(MARGIN - vals, min=0) ** 2).sum()
    loss.backward()
    return W.grad


def composition_loss(W: torch.Tensor, k: int) -> torch.Tensor:
    """The loss of composition_loss_fwd_bwd, forward only (what torch.compile gets)."""
    D = torch.cdist(W, W)
    D = D + torch.diag(torch.full((W.shape[0],), float("inf"), dtype=W.dtype, device=W.device))
    vals, _ = D.topk(k, dim=1, largest=False)
    return (torch.clamp(MARGIN - vals, min=0) ** 2).sum()


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
    row.update(
        fk_knn_s=t_knn,
        fk_knn_peak_mib=mib(m_knn),
        fk_loss_fwd_bwd_s=t_loss,
        fk_loss_peak_mib=mib(m_loss),
        fk_knn_gflops=2 * c * c * d / t_knn / 1e9,
        # compute-bound: the minimum traffic (read W, write dist+idx) is tiny against copy bandwidth
        fk_knn_gbs=(c * d * 4 + c * K * 12) / t_knn / 1e9,
    )
    if run_composition and device == "cpu" and repeat >= 5:
        # peers alternated with ours, minimum of `repeat` each; the times above are overwritten by them
        knn_fns = {"fk": lambda: fedkernels.knn_classes(W, K), "torch": lambda: composition_knn(W, K)}
        cknn, knn_note = compiled_peer(composition_knn_outofplace, W, K)
        if cknn is not None:
            knn_fns["compiled"] = lambda: cknn(W, K)
        loss_fns = {"fk": lambda: fused_loss_fwd_bwd(W, K), "torch": lambda: composition_loss_fwd_bwd(W, K)}
        closs, loss_note = compiled_peer(composition_loss, W, K)
        if closs is not None:

            def compiled_fwd_bwd() -> torch.Tensor:
                Wr = W.detach().requires_grad_(True)
                closs(Wr, K).backward()
                return Wr.grad

            loss_fns["compiled"] = compiled_fwd_bwd
        tk = alternating_min(knn_fns, repeat=repeat)
        tl = alternating_min(loss_fns, repeat=repeat)
        _, idx_fk = fedkernels.knn_classes(W, K)
        _, idx_ref = composition_knn(W, K)
        row.update(
            fk_knn_s=tk["fk"],
            fk_loss_fwd_bwd_s=tl["fk"],
            fk_knn_gflops=2 * c * c * d / tk["fk"] / 1e9,
            torch_knn_s=tk["torch"],
            torch_knn_peak_mib=mib(peak_extra_bytes(lambda: composition_knn(W, K), device)),
            torch_loss_fwd_bwd_s=tl["torch"],
            torch_loss_peak_mib=mib(peak_extra_bytes(lambda: composition_loss_fwd_bwd(W, K), device)),
            compiled_knn_s=tk.get("compiled", knn_note),
            compiled_loss_fwd_bwd_s=tl.get("compiled", loss_note),
            knn_speedup=tk["torch"] / tk["fk"],
            loss_speedup=tl["torch"] / tl["fk"],
            knn_vs_compiled=tk["compiled"] / tk["fk"] if "compiled" in tk else knn_note,
            loss_vs_compiled=tl["compiled"] / tl["fk"] if "compiled" in tl else loss_note,
            rows_same_neighbours=(idx_fk.sort(1).values == idx_ref.sort(1).values).all(1).float().mean().item(),
            composition="run",
        )
        # 1 -> 2 threads of our ops (each alone, minimum of 5 per thread count)
        row["fk_knn_thread_speedup"] = thread_scaling(lambda: fedkernels.knn_classes(W, K))["speedup"]
        row["fk_loss_thread_speedup"] = thread_scaling(lambda: fused_loss_fwd_bwd(W, K))["speedup"]
    elif run_composition:
        t_cknn, m_cknn = measure(lambda: composition_knn(W, K), repeat, device)
        t_closs, m_closs = measure(lambda: composition_loss_fwd_bwd(W, K), repeat, device)
        # same answer check: the neighbour sets of both paths agree
        _, idx_fk = fedkernels.knn_classes(W, K)
        _, idx_ref = composition_knn(W, K)
        agree = (idx_fk.sort(1).values == idx_ref.sort(1).values).all(1).float().mean().item()
        row.update(
            torch_knn_s=t_cknn,
            torch_knn_peak_mib=mib(m_cknn),
            torch_loss_fwd_bwd_s=t_closs,
            torch_loss_peak_mib=mib(m_closs),
            knn_speedup=t_cknn / t_knn,
            loss_speedup=t_closs / t_loss,
            rows_same_neighbours=agree,
            composition="run",
        )
    else:
        row.update(
            composition="not run (needs >= %.0f GB for the [C, C] matrix)" % (c * c * 4 / 1e9),
            torch_knn_peak_mib=mib(c * c * 4),
            torch_loss_peak_mib=mib(3 * c * c * 4),
        )
    return row


def knn_tile_path() -> str:
    """Which CPU tile path knn_classes takes here (float32): the fused register tiles of the CPU level
    in use (avx512, avx2), or the generic level's BLAS tiles."""
    level = fedkernels._info.build_info()["cpu_isa"]
    return f"fused {level} register tiles" if level != "generic" else "BLAS (at::mm) tiles, generic level"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip C = 100000")
    ap.add_argument("--only", nargs="*", metavar="C,d", help="run just these configurations, e.g. 20000,512")
    ap.add_argument("--append", action="store_true", help="merge into the existing result file")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    add_device_arguments(ap)
    ap.add_argument("--skip-peers", action="store_true", help="leave out the faiss self-search peers")
    ap.add_argument("--peers-only", action="store_true", help="only the faiss self-search peers (rows: --append)")
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="faiss peers at one thread, both sides timed by thread CPU time (for a loaded machine)",
    )
    ap.add_argument("--cuda-model", action="store_true", help="only print the CUDA launch model and exit")
    args = ap.parse_args()
    if args.cuda_model:
        print_cuda_launch_model()
        return
    device = check_device_arguments(ap, args)
    on_cpu = torch.device(device).type == "cpu"
    out = results_path("spread", device, args.out, args.quick)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [1000, 20000] + ([] if args.quick else [100000])
    configs = [(c, d) for c in sizes for d in (64, 512)]
    if args.only:
        configs = [tuple(int(v) for v in item.split(",")) for item in args.only]
    previous = {}
    if args.append and out.exists():
        previous = {(r["C"], r["d"]): r for r in json.loads(out.read_text())["rows"]}
    for c, d in [] if args.peers_only else configs:
        # one timed run per configuration from C = 100000 on: they take minutes on 2 shared cores
        # (a GPU repeats every configuration: a single call would time its first-launch costs)
        repeat = 5 if c <= 20000 or not on_cpu else 1
        row = bench_config(c, d, run_composition=c <= 20000, repeat=repeat, device=device)
        print(row, flush=True)
        previous[(c, d)] = row
    rows = [previous[key] for key in sorted(previous)]
    peer_rows, peer_note = [], "skipped (--skip-peers)" if args.skip_peers else "CPU only"
    if on_cpu and not args.skip_peers:
        faiss_peers, peer_note = start_faiss_peers()
        try:
            for c, d in configs:
                if c > 20000:
                    continue  # faiss at C = 100000 takes minutes per call: the ratio is shown at 20000
                W = torch.randn(c, d, generator=torch.Generator().manual_seed(0)) / d**0.5
                for metric in ("l2", "cosine"):
                    threads = (1,) if args.cpu_time else (1, 2)
                    peer_rows.append(knn_peer_row(W, K, metric, faiss_peers, threads=threads, cpu_time=args.cpu_time))
                    print(peer_rows[-1], flush=True)
        finally:
            for peer in faiss_peers.values():
                peer.close()
    load_end = os.getloadavg()
    extra = {
        "knn_peer_rows": peer_rows,
        "knn_peer_note": peer_note,
        "copy_bandwidth_gbs": copy_bandwidth_gbs(device),
        "k": K,
        "margin": MARGIN,
        "knn_tile_path": knn_tile_path() if on_cpu else f"{device} kernels",
        "load_avg_end": load_end,
        "note": load_note(load_end),
    }
    path = write_results("spread", rows, extra, path=out, device=device)
    cols = [
        "C",
        "d",
        "fk_knn_s",
        "torch_knn_s",
        "knn_speedup",
        "fk_knn_peak_mib",
        "torch_knn_peak_mib",
        "fk_loss_fwd_bwd_s",
        "torch_loss_fwd_bwd_s",
        "loss_speedup",
        "fk_loss_peak_mib",
        "torch_loss_peak_mib",
        "fk_knn_gflops",
        "compiled_knn_s",
        "knn_vs_compiled",
        "compiled_loss_fwd_bwd_s",
        "loss_vs_compiled",
        "fk_knn_thread_speedup",
        "fk_loss_thread_speedup",
        "load_avg_1min",
        "composition",
    ]
    print(markdown_table(rows, cols))
    if peer_rows:
        names = [n for n in ("env", "skx", "hsw") if f"faiss_{n}_t1_s" in peer_rows[0]]
        peer_cols = ["C", "d", "metric"]
        for t in (1, 2) if "fk_t2_s" in peer_rows[0] else (1,):
            peer_cols += [f"fk_t{t}_s"] + [f"faiss_{n}_t{t}_s" for n in names] + [f"vs_faiss_best_t{t}"]
        if "fk_thread_speedup" in peer_rows[0]:
            peer_cols += ["fk_thread_speedup"] + [f"faiss_{n}_thread_speedup" for n in names]
        peer_cols += [f"same_neighbours_faiss_{n}" for n in names] + ["load_avg_1min"]
        print(f"\nknn_classes vs faiss self-search ({peer_note}):")
        print(markdown_table(peer_rows, peer_cols))
    else:
        print(f"\nfaiss peer: {peer_note}")
    print(
        f"knn tile path: {extra['knn_tile_path']}; copy bandwidth {extra['copy_bandwidth_gbs']:.1f} GB/s; "
        f"results in {path}"
    )
    print_cuda_launch_model()


def print_cuda_launch_model() -> None:
    cols = [
        "kernel",
        "launches",
        "blocks",
        "threads",
        "warps/SM",
        "resident",
        "waves",
        "MB",
        "us@3.35TB/s",
        "GFLOP",
        "us@peak",
        "bound",
        "note",
    ]
    for d in (64, 512):
        print(f"\nCUDA launches on an H100 (132 SMs), C = 100000, d = {d}, k = {K} (analytic):")
        print(markdown_table(cuda_launch_model(100000, d), cols))


if __name__ == "__main__":
    main()
