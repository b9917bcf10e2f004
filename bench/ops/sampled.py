"""Benchmark of the sampled-softmax kernels against the PyTorch compositions a user would write.

    PYTHONPATH=src python -m bench.ops.sampled [--device cpu|cuda] [--quick] [--out PATH]

- linear_cross_entropy vs ``F.cross_entropy(h @ W.T + bias, target)`` (eager), ``torch.compile`` of it,
  and cut-cross-entropy's ``linear_cross_entropy(impl="torch_compile")`` (its only CPU path; it has no
  bias argument, so it runs in the no-bias rows only): N in {2048, 4096}, d = 256, s in {16384, 65536,
  131072} (``--lce-sizes``), float32, with and without bias; forward (no grad) and forward + backward;
  minimum of 5 alternated calls at 1 and 2 threads (``vs_X`` = X's time / ours, > 1: ours faster;
  ``*_thread_speedup`` = 1-thread / 2-thread time), and peak extra memory of each.
- scatter_rows_mean vs an ``index_add_``-based weighted mean, d = 256, n in {4096, 16384, 131072}
  output rows and T in {16384, 65536} sources: time ratio, and achieved bandwidth (bytes it must
  read and write: T * (4 d + 8 + 4) + rows_written * 4 d) against the copy bandwidth measured just
  before and just after it (the faster of the two). Peers (``scatter_peers``): ``index_reduce_`` mean
  and torch-scatter's ``scatter_mean`` (unweighted: timed against ours with weights 1), and
  ``torch.compile`` of the index_add_ composition; ours' 1-to-2-thread speed-up.

The linear_cross_entropy part runs in a child process with MALLOC_MMAP_THRESHOLD_=65536 so that
peak memory can be read from the resident set; scatter_rows_mean is timed with glibc's defaults.

On cuda both parts run in this process (peak memory is the caching allocator's peak) and the copy
bandwidth is a copy on the GPU.

Writes build/bench-results/sampled.json (cpu) or gpu-check/bench/sampled.json (cuda) unless --out says
where (the committed table: ``--out bench/results/ops/sampled.json``), and prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import torch
import torch.nn.functional as F

import fedkernels
from bench.common import (
    add_device_arguments,
    check_device_arguments,
    copy_bandwidth_gbs,
    cpu_model,
    load_note,
    markdown_table,
    mib,
    peak_extra_bytes,
    rerun_argv,
    results_path,
    timeit,
    write_results,
)
from bench.ops.peers import alternating_min, compiled_peer, fresh_compiles, optional_peer, thread_scaling

LCE_MODES = ("fwd", "fwd+bwd")
LCE_PEERS = ("eager", "compiled", "cce")


def _lce_contenders(h, W, b, t, mode: str, with_bias: bool, peers: tuple[str, ...] = LCE_PEERS) -> tuple[dict, dict]:
    """The callables to time for one (mode, bias) case (ours and ``peers``), and why any peer is missing.
    Eager is always built: the memory goal is relative to it."""
    leaves = [x.clone().requires_grad_() for x in (h, W, b)]
    bias = b if with_bias else None

    def eager(h, W, t, b=None):
        return F.cross_entropy(h @ W.T + b if b is not None else h @ W.T, t)

    def ours(h, W, t, b=None):
        return fedkernels.linear_cross_entropy(h, W, t, b)

    fns: dict = {"ours": ours, "eager": eager}
    missing: dict = {}
    args = (h, W, t) + ((bias,) if with_bias else ())
    if "compiled" not in peers:
        missing["compiled"] = "not asked for (--lce-peers)"
    else:
        with torch.no_grad() if mode == "fwd" else torch.enable_grad():
            compiled, why = compiled_peer(eager, *((*leaves[:2], t, leaves[2]) if with_bias else (*leaves[:2], t)))
        if compiled is None:
            missing["compiled"] = why
        else:
            fns["compiled"] = compiled
    cce_mod, cce_why = optional_peer("cut_cross_entropy") if "cce" in peers else (None, "not asked for (--lce-peers)")
    if cce_mod is None:
        missing["cce"] = cce_why
    elif with_bias:
        missing["cce"] = "cut-cross-entropy 25.1.1 linear_cross_entropy has no bias argument"
    else:
        fns["cce"] = lambda h, W, t, b=None: cce_mod.linear_cross_entropy(h, W, t, impl="torch_compile")

    def run(fn):
        if mode == "fwd":

            def call():
                with torch.no_grad():
                    return fn(*args)

        else:

            def call():
                for x in leaves:
                    x.grad = None
                fn(leaves[0], leaves[1], t, leaves[2] if with_bias else None).backward()
                return [x.grad for x in leaves]

        return call

    return {name: run(fn) for name, fn in fns.items()}, missing


def lce_rows(
    device: str,
    configs: list[tuple[int, int]],
    d: int = 256,
    threads: tuple[int, ...] = (1, 2),
    modes: tuple[str, ...] = LCE_MODES,
    peers: tuple[str, ...] = LCE_PEERS,
    cpu_time: bool = False,
) -> list[dict]:
    """Ours vs eager, torch.compile and cut-cross-entropy: alternating minima at each thread count, peak
    memory. ``peers`` picks among eager / compiled / cce (eager's peak memory is always measured).
    ``cpu_time``: one thread, every contender timed by the thread's CPU time (a loaded machine's wall
    time counts the slices other processes take)."""
    if cpu_time:
        threads = (1,)
    rows = []
    for n, s in configs:
        fresh_compiles()  # compiled peers see this (N, s) as their first shapes
        g = torch.Generator().manual_seed(s + n)
        h = torch.randn(n, d, generator=g).to(device) / d**0.5
        W = torch.randn(s, d, generator=g).to(device)
        b = torch.randn(s, generator=g).to(device)
        t = torch.randint(0, s, (n,), generator=g).to(device)
        with torch.no_grad():  # same answer first
            torch.testing.assert_close(
                fedkernels.linear_cross_entropy(h, W, t, b), F.cross_entropy(h @ W.T + b, t), rtol=1e-4, atol=1e-4
            )
        for with_bias in (True, False):
            for mode in modes:
                calls, missing = _lce_contenders(h, W, b, t, mode, with_bias, peers)
                timed = {k: v for k, v in calls.items() if k == "ours" or k in peers}
                best: dict[int, dict[str, float]] = {}
                before = torch.get_num_threads()
                try:
                    for nt in threads:
                        torch.set_num_threads(nt)
                        clock = time.thread_time if cpu_time else time.perf_counter
                        best[nt] = alternating_min(timed, repeat=5, clock=clock)
                finally:
                    torch.set_num_threads(before)
                peak = {name: peak_extra_bytes(fn, device) for name, fn in calls.items()}
                for nt in threads:
                    row = {"op": "linear_cross_entropy", "mode": mode, "bias": with_bias, "N": n, "d": d, "s": s}
                    row["threads"] = nt
                    row["clock"] = "thread CPU time" if cpu_time else "wall"
                    for name in ("ours", "eager", "compiled", "cce"):
                        if name in best[nt]:
                            row[f"{name}_ms"] = best[nt][name] * 1e3
                            row[f"{name}_peak_MiB"] = mib(peak[name])
                            if len(threads) > 1:
                                row[f"{name}_thread_speedup"] = best[threads[0]][name] / best[threads[-1]][name]
                            if name != "ours":
                                row[f"vs_{name}"] = best[nt][name] / best[nt]["ours"]  # > 1: ours faster
                        else:
                            row[f"{name}_ms"] = None
                            row[f"{name}_missing"] = missing.get(name, "not asked for (--lce-peers)")
                    row["peak_ratio_vs_eager"] = peak["ours"] / max(peak["eager"], 1)
                    rows.append(row)
                    print(row, flush=True)
    return rows


def copy_bandwidth_now(device: str, nbytes: int = 1 << 28) -> float:
    """copy_bandwidth_gbs measured again (not cached): on a shared machine it moves with the load."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    return 2 * nbytes / timeit(lambda: dst.copy_(src), device, repeat=9) / 1e9


def scatter_peers(out, idx, src, w, n: int, device: str) -> dict:
    """Peers of scatter_rows_mean, alternated with ours in one loop (minimum of 5 each).

    - index_reduce_(0, idx, src, "mean", include_self=False) is an unweighted mean: it is timed, and
      checked bit for bit, against ours with all weights 1 (the same mean).
    - torch_scatter.scatter_mean (unweighted too, if it imports) plus the copy of the touched rows
      into out, on the same weight-1 case.
    - torch.compile of the weighted index_add_ composition, against ours on the weighted case.
    Also ours' speed-up from 1 to 2 threads (bench/ops/peers.py thread_scaling).
    """
    ones = torch.ones_like(w)
    touched = torch.unique(idx)
    res: dict = {}

    def ours_w(w=w):
        return fedkernels.scatter_rows_mean(out, idx, src, w)

    def ours_1():
        return fedkernels.scatter_rows_mean(out, idx, src, ones)

    def index_reduce():
        return out.index_reduce_(0, idx, src, "mean", include_self=False)

    def composition(out, idx, src, w):
        num = torch.zeros_like(out).index_add_(0, idx, src * w[:, None])
        den = torch.zeros(out.shape[0], device=out.device, dtype=out.dtype).index_add_(0, idx, w)
        safe = torch.where(den > 0, den, torch.ones_like(den))
        return torch.where((den > 0)[:, None], num / safe[:, None], out)

    base = out.clone()
    a = ours_1().clone()
    out.copy_(base)
    bitequal = torch.equal(a, index_reduce())
    out.copy_(base)
    res["index_reduce_bitequal_w1"] = bitequal
    calls = {"ours_w1": ours_1, "index_reduce": index_reduce, "ours": ours_w}
    ts, why = optional_peer("torch_scatter")
    if ts is None:
        res["torch_scatter_missing"] = why
    else:

        def scatter_mean():
            m = ts.scatter_mean(src, idx, dim=0, dim_size=n)
            out[touched] = m[touched]
            return out

        torch.testing.assert_close(scatter_mean().clone(), a)
        out.copy_(base)
        calls["torch_scatter"] = scatter_mean
    compiled, cwhy = compiled_peer(composition, out, idx, src, w)
    if compiled is None:
        res["compiled_missing"] = cwhy
    else:
        torch.testing.assert_close(compiled(base, idx, src, w), ours_w().clone())
        calls["compiled"] = lambda: compiled(out, idx, src, w)
    best = alternating_min(calls, repeat=5)
    res["ours_w1_ms"] = best["ours_w1"] * 1e3
    res["index_reduce_ms"] = best["index_reduce"] * 1e3
    res["vs_index_reduce"] = best["index_reduce"] / best["ours_w1"]
    if "torch_scatter" in best:
        res["torch_scatter_ms"] = best["torch_scatter"] * 1e3
        res["vs_torch_scatter"] = best["torch_scatter"] / best["ours_w1"]
    if "compiled" in best:
        res["compiled_ms"] = best["compiled"] * 1e3
        res["vs_compiled"] = best["compiled"] / best["ours"]
    scaling = thread_scaling(ours_w)
    res["thread_speedup"] = scaling["speedup"]
    out.copy_(base)
    return res


def scatter_rows(device: str, configs: list[tuple[int, int]], d: int = 256) -> list[dict]:
    rows = []
    for n, t_count in configs:
        bw_before = copy_bandwidth_now(device)  # next to the kernel's timing, so the fraction compares like with like
        g = torch.Generator().manual_seed(n + t_count)
        out = torch.randn(n, d, generator=g).to(device)
        idx = torch.randint(0, n, (t_count,), generator=g).to(device)
        src = torch.randn(t_count, d, generator=g).to(device)
        w = (torch.rand(t_count, generator=g) + 0.1).to(device)
        unique_rows = int(torch.unique(idx).numel())

        def ours(out=out, idx=idx, src=src, w=w):
            return fedkernels.scatter_rows_mean(out, idx, src, w)

        def composition(out=out, idx=idx, src=src, w=w, n=n):
            num = torch.zeros_like(out).index_add_(0, idx, src * w[:, None])
            den = torch.zeros(n, device=device).index_add_(0, idx, w)
            touched = torch.unique(idx)
            out[touched] = num[touched] / den[touched, None]
            return out

        want = composition().clone()
        torch.testing.assert_close(ours().clone(), want)  # same answer first
        t_ours = timeit(ours, device)
        t_ref = timeit(composition, device)
        peers = scatter_peers(out, idx, src, w, n, device) if device == "cpu" else {}
        # what must move: every source row and its id and weight read, every named output row written
        # The VM's copy speed jumps between two levels: measure it on both sides of the
        # timing and compare against the faster one (the stricter fraction).
        bw = max(bw_before, copy_bandwidth_now(device))
        nbytes = t_count * (d * 4 + 8 + 4) + unique_rows * d * 4
        rows.append(
            {
                "op": "scatter_rows_mean",
                "n": n,
                "d": d,
                "T": t_count,
                "rows_written": unique_rows,
                "fedkernels_ms": t_ours * 1e3,
                "torch_ms": t_ref * 1e3,
                "speedup": t_ref / t_ours,
                "GB/s": nbytes / t_ours / 1e9,
                "copy_GB/s": bw,
                "frac_of_copy": nbytes / t_ours / 1e9 / bw,
                "fedkernels_peak_MiB": mib(peak_extra_bytes(ours, device)),
                "torch_peak_MiB": mib(peak_extra_bytes(composition, device)),
                **peers,
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes only (a smoke run, not the issue's table)")
    ap.add_argument("--parts", default="lce,scatter", help="which parts to (re)run; others keep their saved rows")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for the scatter part (0: torch's default)")
    ap.add_argument(
        "--lce-sizes",
        default="",
        help="linear_cross_entropy (N x s) list, e.g. 2048x16384,2048x65536 (default: the issue's N in {2048, 4096}, "
        "s in {16384, 65536, 131072}); each is timed at 1 and 2 threads, and the saved rows of other pairs are kept",
    )
    ap.add_argument("--lce-modes", default=",".join(LCE_MODES), help="linear_cross_entropy modes: fwd, fwd+bwd")
    ap.add_argument(
        "--lce-peers", default=",".join(LCE_PEERS), help="linear_cross_entropy peers timed: eager, compiled, cce"
    )
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="linear_cross_entropy at one thread, timed by thread CPU time (for a loaded machine)",
    )
    add_device_arguments(ap)
    args = ap.parse_args()
    args.device = check_device_arguments(ap, args)
    out = results_path("sampled", args.device, args.out, args.quick)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    parts = set(args.parts.split(","))
    if "lce" in parts and args.device == "cpu" and os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
        # The LCE goal is peak memory, read from the resident set: there every allocation above
        # 64 KiB must be its own mmap, so freed blocks leave the process instead of being reused
        # silently (which would read as 0 extra). That child process writes its rows first. The
        # scatter part is timed here, under the allocator users run: with the 64 KiB threshold every
        # scratch array of every call is a fresh mmap paying page faults (a large share of the op's time).
        subprocess.run(
            [*rerun_argv(), "--parts", "lce"],
            check=True,
            env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"},
        )
        parts.discard("lce")
        if not parts:
            return
    load_start = os.getloadavg()  # the machine may be shared: say how busy it was
    if args.lce_sizes:
        lce_configs = [tuple(int(v) for v in item.split("x")) for item in args.lce_sizes.split(",")]
    else:
        lce_configs = [(256, 1024)] if args.quick else [(n, s) for n in (2048, 4096) for s in (16384, 65536, 131072)]
    # (n output rows, T sources): the N = 4096 rows, and wider matrices where most rows get one source
    configs = [(4096, 16384)] if args.quick else [(4096, 16384), (4096, 65536), (16384, 16384), (131072, 65536)]
    saved = json.loads(out.read_text())["rows"] if out.exists() else []
    keep = {"lce": "linear_cross_entropy", "scatter": "scatter_rows_mean"}
    saved_lce = [r for r in saved if r["op"] == keep["lce"]]
    if "lce" in parts:
        lce = lce_rows(
            args.device,
            lce_configs,
            modes=tuple(args.lce_modes.split(",")),
            peers=tuple(args.lce_peers.split(",")),
            cpu_time=args.cpu_time,
        )
        cpu = cpu_model()
        for r in lce:  # rows of several runs may share the file: each says how busy its run was, and where
            r["load_avg_1min"] = round(load_start[0], 2)
            r["cpu"] = cpu
        if args.lce_sizes:  # only these (N, s) were rerun: the other pairs keep their saved rows
            redone = {(r["N"], r["s"]) for r in lce}
            lce = sorted([r for r in saved_lce if (r["N"], r["s"]) not in redone] + lce, key=lambda r: (r["N"], r["s"]))
    else:
        lce = saved_lce
    sc = scatter_rows(args.device, configs) if "scatter" in parts else [r for r in saved if r["op"] == keep["scatter"]]
    load_end = os.getloadavg()
    extra = {
        "copy_bandwidth_gbs": copy_bandwidth_gbs(args.device),
        "load_average_start": load_start,
        "load_average_end": load_end,
        "note": load_note(load_end),
        "malloc": "linear_cross_entropy rows: MALLOC_MMAP_THRESHOLD_=65536 "
        "(peak memory); scatter_rows_mean rows: glibc defaults",
    }
    if args.device != "cpu":
        extra["note"] = "ratios are from the same run"
        extra["malloc"] = "peak memory: the CUDA caching allocator's peak"
    path = write_results("sampled", lce + sc, extra, path=out, device=args.device)
    print(
        markdown_table(
            lce,
            [
                "mode",
                "bias",
                "N",
                "s",
                "threads",
                "ours_ms",
                "vs_eager",
                "vs_compiled",
                "vs_cce",
                "ours_thread_speedup",
                "compiled_thread_speedup",
                "ours_peak_MiB",
                "eager_peak_MiB",
                "peak_ratio_vs_eager",
            ],
        )
    )
    print()
    print(
        markdown_table(
            sc,
            [
                "n",
                "T",
                "rows_written",
                "fedkernels_ms",
                "torch_ms",
                "speedup",
                "vs_index_reduce",
                "vs_torch_scatter",
                "vs_compiled",
                "thread_speedup",
                "GB/s",
                "frac_of_copy",
            ],
        )
    )
    print(f"\nload average (1, 5, 15 min) at start {load_start}, at end {load_end}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
