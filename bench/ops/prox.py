"""Benchmark of the prox family: prox_tv1d speed and the update codec's size on a real gradient.

Compares, in the same run:
- prox_tv1d (exact, linear time) against an iterative dual projected-gradient (FISTA) solver in
  PyTorch, the composition a user would write without this library, and against Condat's C code
  as shipped by the PyPI package prox-tv (``tv1_1d(x, w, method='condat')``; optional, bench-only);
- a lam sweep (0.01 .. 100 times the input's noise scale) on three signals (i.i.d. noise, random walk,
  noisy piecewise constant), d = 1e6 (and 1e3, 1e7 in a full run), float64 and float32, against the
  fastest of prox-tv's methods, calls alternated, with the max abs difference (lam_sweep_rows);
- ns per element for d = 1e3 .. 1e7 on one thread (each call on a fresh row, see cycler), rows per
  second for batches on 1 and 2 threads (parallel efficiency), peak extra memory, achieved GB/s
  against measured copy bandwidth;
- bits per parameter of the l1-difference update sent through fedkernels.comm, for a gamma sweep,
  on the gradient of a linear multi-label model on the real Delicious dataset.

Run: PYTHONPATH=src python -m bench.ops.prox [--quick] [--device cuda] [--out PATH]

With --device cuda only the speed sweep runs (prox_tv1d and the FISTA composition on the GPU, GB/s
against a copy on the GPU); Condat's C code, the one/two-thread batches and the host-only codec are
CPU measurements and are skipped. A cuda run writes gpu-check/bench/prox.json unless --out is given.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

# Output buffers on transparent huge pages, as numpy (prox-tv's outputs) does for large arrays: with
# torch's default 4 KiB pages an 80 MB output at d = 1e7 pays a page fault per page on every call
# (empty_like + fill then costs several times np.zeros + fill), which would time the allocator, not
# the solvers. Read by torch's CPU allocator, so it must be set before the first allocation.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch

import fedkernels
from bench import common
from bench.common import DATA, multi_hot, read_xc
from fedkernels.comm import decode_runs, encode_runs, quantize_runs

# glibc's own policy for the 8 MB outputs at d = 1e6 is bimodal across processes: mmap'd fresh each
# call (paying page faults) or reused from the heap (nearly free), depending on its dynamic mmap
# threshold and heap trimming (numpy's 8 MB output costs the same either way).
# Pin what glibc's dynamic thresholds move toward in a long-running process, for both contenders:
# blocks up to 32 MiB from the heap, freed pages kept. Read by glibc at start, so the bench re-executes
# itself once with them set (a user's own values win; see the end of this file).
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "268435456"}


def pg_baseline(z: torch.Tensor, lam: float, anchored: bool, iters: int) -> torch.Tensor:
    """FISTA on the dual of the TV prox (box constraints |p| <= lam), in plain PyTorch."""
    d = z.shape[-1]
    m = d if anchored else d - 1
    p = torch.zeros(*z.shape[:-1], m, dtype=z.dtype, device=z.device)
    p_prev, t = p, 1.0

    def dt(q: torch.Tensor) -> torch.Tensor:  # D^T q, (D^T q)_i = q_i - q_{i-1}
        full = torch.nn.functional.pad(q, (1, d - m))
        return full[..., 1:] - full[..., :-1]

    for _ in range(iters):
        t_next = 0.5 * (1 + math.sqrt(1 + 4 * t * t))
        v = p + ((t - 1) / t_next) * (p - p_prev)
        r = z - dt(v)
        grad = -(r[..., :m] - torch.nn.functional.pad(r, (0, 1))[..., 1 : m + 1])
        p_prev, p, t = p, (v - 0.25 * grad).clamp(-lam, lam), t_next
    return z - dt(p)


def objective(z: torch.Tensor, u: torch.Tensor, lam: float, anchored: bool) -> float:
    tv = (u[..., 1:] - u[..., :-1]).abs().sum() + (u[..., -1].abs().sum() if anchored else 0)
    return float(0.5 * ((u - z) ** 2).sum() + lam * tv)


POOL = 1 << 21  # samples of distinct input cycled through by the d sweep (see cycler)


def cycler(rows) -> callable:
    """Returns a function giving the next row of ``rows`` on each call, round robin.

    Timing one vector over and over lets the CPU's branch predictor learn its branch pattern when
    d <= 1e4 or so (several times faster for branchy solvers like Condat's, unlike any real call, where the
    gradient is new each time), so each timed call gets the next of POOL / d distinct rows.
    """
    state = {"i": 0}

    def nxt():
        r = rows[state["i"] % len(rows)]
        state["i"] += 1
        return r

    return nxt


def cpu_time(fn: callable, calls: int) -> float:
    """Median thread CPU seconds per call over 5 batches of ``calls`` (one thread: the op runs
    inline). Unlike wall time it excludes time slices lost to other processes on a shared machine."""
    fn()
    per = []
    for _ in range(5):
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        per.append((time.thread_time() - t0) / calls)
    return statistics.median(per)


def speed_rows(quick: bool, device: str = "cpu") -> list[dict]:
    on_cpu = torch.device(device).type == "cpu"
    try:
        import prox_tv
    except ImportError:
        prox_tv = None
    if not on_cpu:
        prox_tv = None  # Condat's C code runs on the host: no same-device comparison
    copy_gbs = common.copy_bandwidth_gbs(device)
    rows = []
    old = torch.get_num_threads()
    if on_cpu:
        torch.set_num_threads(1)
    sizes = [10**3, 10**4, 10**5, 10**6] + ([] if quick else [10**7])
    g = torch.Generator().manual_seed(0)
    lam = 1.0
    for d in sizes:
        pool64 = torch.randn(max(1, POOL // d), d, generator=g, dtype=torch.float64).to(device)
        pool32 = pool64.float()
        z64, z32 = pool64[0], pool32[0]
        next32, next64 = cycler(list(pool32)), cycler(list(pool64))
        row = {"d": d, "lam": lam, "distinct rows": pool64.shape[0]}
        t = common.timeit(lambda next32=next32: fedkernels.prox_tv1d(next32(), lam, True), device, repeat=5)
        row["ns/elem f32 anchored"] = t / d * 1e9
        calls = max(1, min(200, 10**7 // d))
        if on_cpu:
            row["cpu ns/elem f32 anchored"] = (
                cpu_time(lambda next32=next32: fedkernels.prox_tv1d(next32(), lam, True), calls) / d * 1e9
            )
        row["GB/s f32"] = 8 * d / t / 1e9
        row["copy GB/s"] = copy_gbs
        t_free = common.timeit(lambda next64=next64: fedkernels.prox_tv1d(next64(), lam, False), device, repeat=5)
        row["ns/elem f64 free"] = t_free / d * 1e9
        if prox_tv is not None:
            nextn = cycler([r.numpy() for r in pool64])
            t_c = common.timeit(lambda nextn=nextn: prox_tv.tv1_1d(nextn(), lam, method="condat"), repeat=5)
            row["condat ns/elem"] = t_c / d * 1e9
            row["condat cpu ns/elem"] = (
                cpu_time(lambda nextn=nextn: prox_tv.tv1_1d(nextn(), lam, method="condat"), calls) / d * 1e9
            )
            row["ours/condat"] = t_free / t_c
            row["f32 anchored/condat"] = t / t_c
            ref = torch.from_numpy(prox_tv.tv1_1d(z64.numpy(), lam, method="condat"))
            row["max |ours-condat|"] = float((fedkernels.prox_tv1d(z64, lam, False) - ref).abs().max())
        if d <= 10**6:
            iters = 100
            t_pg = common.timeit(
                lambda z32=z32, iters=iters: pg_baseline(z32, lam, True, iters), device, repeat=3, warmup=1
            )
            exact = fedkernels.prox_tv1d(z64, lam, True)
            f_star = objective(z64, exact, lam, True)
            f_pg = objective(z64, pg_baseline(z64, lam, True, iters).double(), lam, True)
            row["pg100 ns/elem"] = t_pg / d * 1e9
            row["pg100/ours"] = t_pg / t
            row["pg100 rel. gap"] = (f_pg - f_star) / abs(f_star)
        if d == 10**6:
            row["ours peak MiB"] = common.mib(
                common.peak_extra_bytes(lambda z32=z32: fedkernels.prox_tv1d(z32, lam, True), device)
            )
            row["pg peak MiB"] = common.mib(
                common.peak_extra_bytes(lambda z32=z32: pg_baseline(z32, lam, True, 5), device)
            )
        rows.append(row)
        print(row, flush=True)
    torch.set_num_threads(old)
    return rows


LAMS = [0.01, 0.1, 0.5, 1.0, 2.0, 100.0]
PEER_METHODS = ("condat", "hybridtautstring")  # prox-tv's direct algorithm and its default method


def signal(kind: str, d: int, g: torch.Generator) -> torch.Tensor:
    """A float64 test row of length d whose sample-to-sample noise has standard deviation 1, so lam is
    in units of that noise for every kind (the "input scale" of the sweep):

    - ``randn``: i.i.d. N(0, 1), the signal of the d sweep above (many short segments at small lam);
    - ``walk``: a random walk, cumsum of N(0, 1) (long drifting stretches: long rescans at large lam);
    - ``pwc``: piecewise constant with a jump of N(0, 9) variance at each sample with probability 1e-3,
      plus N(0, 1) noise (the denoising case TV is meant for).
    """
    x = torch.randn(d, generator=g, dtype=torch.float64)
    if kind == "randn":
        return x
    if kind == "walk":
        return x.cumsum(0)
    jumps = torch.randn(d, generator=g, dtype=torch.float64) * (torch.rand(d, generator=g, dtype=torch.float64) < 1e-3)
    return 3.0 * jumps.cumsum(0) + x


def lam_sweep_rows(quick: bool) -> list[dict]:
    """prox_tv1d against prox-tv over lam, signals, sizes and dtypes: one thread, calls alternated.

    d = 1e7 runs the N(0, 1) signal in float64 only. The peer is the fastest of prox-tv's ``condat``
    and ``hybridtautstring`` (its default) per row;
    it always gets float64 data (its only dtype; converted outside the timed call), so float32 rows
    compare our float32 solve with the peer's float64 one. Rows cycle through distinct inputs (see
    cycler). The batched column times the same lam on [16, d / 16] at 1 and 2 threads: one row is
    sequential (a taut string has no parallel split), only rows (or blockwise blocks) run in parallel.
    ``peer/ours`` is from wall time, ``peer/ours cpu`` from thread CPU time (both alternated, minima).
    """
    from bench.ops.peers import alternating_min, optional_peer, thread_scaling

    prox_tv, why = optional_peer("prox_tv")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    sizes = [10**6] if quick else [10**3, 10**6, 10**7]
    kinds = ["randn"] if quick else ["randn", "walk", "pwc"]
    rows = []
    for d in sizes:
        g = torch.Generator().manual_seed(2)
        for kind in kinds:
            pool64 = [signal(kind, d, g) for _ in range(max(1, min(64, POOL // d)))]
            if d >= 10**7 and kind != "randn":
                continue  # d = 1e7: the N(0, 1) signal only (a 2-core shared machine's time budget)
            for dtype in (torch.float64, torch.float32) if d < 10**7 else (torch.float64,):
                pool = [r.to(dtype) for r in pool64]
                nxt_ours, nxt_peer = cycler(pool), cycler([r.numpy() for r in pool64])
                for lam in LAMS:
                    fns = {"ours": lambda lam=lam, nxt=nxt_ours: fedkernels.prox_tv1d(nxt(), lam, False)}
                    if prox_tv is not None:
                        for m in PEER_METHODS:
                            fns[m] = lambda lam=lam, m=m, nxt=nxt_peer: prox_tv.tv1_1d(nxt(), lam, method=m)
                    repeat = 5 if d >= 10**7 else 7
                    calls = 1 if d >= 10**5 else max(1, 10**5 // d)  # short rows: time a batch of calls

                    def batched(f, calls=calls):
                        return lambda: [f() for _ in range(calls)]

                    t = alternating_min({k: batched(f) for k, f in fns.items()}, repeat=repeat)
                    tc = alternating_min({k: batched(f) for k, f in fns.items()}, repeat=repeat, clock=time.thread_time)
                    u = fedkernels.prox_tv1d(pool[0], lam, False)
                    row = {
                        "signal": kind,
                        "d": d,
                        "dtype": str(dtype).removeprefix("torch."),
                        "lam": lam,
                        "segments": int(torch.count_nonzero(u[1:] != u[:-1])) + 1,
                        "ours ms": t["ours"] / calls * 1e3,
                    }
                    if prox_tv is None:
                        row["peer"] = why
                    else:
                        best = min(PEER_METHODS, key=lambda m: t[m])
                        ref = torch.from_numpy(prox_tv.tv1_1d(pool64[0].numpy(), lam, method=best))
                        row |= {
                            "condat ms": t["condat"] / calls * 1e3,
                            "hybridtautstring ms": t["hybridtautstring"] / calls * 1e3,
                            "peer": best,
                            "peer/ours": t[best] / t["ours"],
                            "peer/ours cpu": min(tc[m] for m in PEER_METHODS) / tc["ours"],
                            "max |ours-peer|": float((u.double() - ref).abs().max()),
                        }
                    if d == 10**6 and kind == "randn":
                        zb = pool[0].view(16, -1)
                        sc = thread_scaling(lambda zb=zb, lam=lam: fedkernels.prox_tv1d(zb, lam, False))
                        torch.set_num_threads(1)
                        row["batched 16 rows 1->2 thr"] = sc["speedup"]
                    row["torch.compile"] = "n/a: no torch composition of the sequential taut string"
                    rows.append(row)
                    print({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    torch.set_num_threads(old)
    return rows


def batch_rows(quick: bool) -> list[dict]:
    """Many rows in one call (lam 0.5): rows/s at 1 and 2 threads, against prox-tv's Condat solver
    looped over the same rows on one thread (it takes one 1D float64 vector per call)."""
    from bench.ops.peers import alternating_min, optional_peer

    prox_tv, why = optional_peer("prox_tv")
    rows = []
    old = torch.get_num_threads()
    g = torch.Generator().manual_seed(1)
    for n_rows, d in [(4096, 1000), (256, 100_000)] if not quick else [(1024, 1000)]:
        z = torch.randn(n_rows, d, generator=g)
        times = {}
        for th in (1, 2):
            torch.set_num_threads(th)
            times[th] = common.timeit(lambda z=z: fedkernels.prox_tv1d(z, 0.5), repeat=5)
        torch.set_num_threads(1)
        peer_cols: dict = {"condat loop": why}
        if prox_tv is not None:
            z64 = list(z.double().numpy())  # its only dtype; converted outside the timing
            t = alternating_min(
                {
                    "ours": lambda z=z: fedkernels.prox_tv1d(z, 0.5),
                    "condat": lambda z64=z64: [prox_tv.tv1_1d(r, 0.5, method="condat") for r in z64],
                },
                repeat=5,
            )
            peer_cols = {
                "condat loop rows/s": n_rows / t["condat"],
                "condat loop / ours (1 thread)": t["condat"] / t["ours"],
            }
        one = torch.randn(n_rows * d, generator=g)
        torch.set_num_threads(2)
        t_block = common.timeit(lambda one=one, d=d: fedkernels.prox_tv1d(one, 0.5, block_size=d), repeat=5)
        row = {
            "rows x d": f"{n_rows} x {d}",
            "rows/s 1 thread": n_rows / times[1],
            "rows/s 2 threads": n_rows / times[2],
            "parallel efficiency": times[1] / (2 * times[2]),
            "blockwise 1-vector ns/elem (2 thr)": t_block / (n_rows * d) * 1e9,
            **peer_cols,
        }
        rows.append(row)
        print(row, flush=True)
    torch.set_num_threads(old)
    return rows


def codec_rows(quick: bool) -> list[dict]:
    """Bits per parameter of the l1-difference update of a real gradient, over gamma."""
    path = DATA / "delicious" / "train.txt"
    if not path.exists():
        print(f"skipping codec sweep: {path} not found")
        return []
    x, labels, nl = read_xc(path, 2000)
    y = multi_hot(labels, nl)
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], y.shape[1])
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    g = torch.cat([t.reshape(-1) for t in grads]).detach()
    dense_bits = 32 * g.numel()
    eta = 1.0
    rows = []
    gscale = float(g.abs().mean())
    for rel in [0.0, 0.1, 0.3, 1.0, 3.0, 10.0] if not quick else [0.1, 1.0]:
        gamma = rel * gscale
        u = fedkernels.prox_tv1d(-eta * g, eta * gamma) if gamma > 0 else -eta * g
        update = -u / eta  # (x - v) / eta, what the client sends
        data = encode_runs(update)
        assert torch.equal(decode_runs(data), update)
        row = {
            "gamma / mean|g|": rel,
            "params": g.numel(),
            "runs": int(torch.unique_consecutive(update).numel()),
            "bits/param f32 runs": 8 * len(data) / g.numel(),
            "bits/param f16 runs": 8 * len(encode_runs(update, "float16")) / g.numel(),
            "bits/param kmeans16": 8 * len(encode_runs(quantize_runs(update, 16))) / g.numel(),
            "ratio vs dense f32": dense_bits / (8 * len(data)),
            "rel. error vs g": float((update - g).norm() / g.norm()),
        }
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    common.add_device_arguments(ap)
    args = ap.parse_args()
    device = common.check_device_arguments(ap, args)
    on_cpu = torch.device(device).type == "cpu"
    speed = speed_rows(args.quick, device)
    sweep = lam_sweep_rows(args.quick) if on_cpu else []  # the peer (prox-tv) runs on the host
    batch = batch_rows(args.quick) if on_cpu else []  # thread scaling is a CPU question
    codec = codec_rows(args.quick) if on_cpu else []  # the codec runs on bytes on the host
    load = os.getloadavg()
    note = common.load_note(load)
    extra = {
        "lam_sweep": sweep,
        "batches": batch,
        "codec": codec,
        "codec_compile": "n/a: the codec (encode_runs / decode_runs) is timed by no torch composition here, "
        "only its sizes are measured, so there is nothing to torch.compile",
        "note": note,
        "load_average_at_end": list(load),
        "allocator": {k: os.environ.get(k) for k in (*ALLOCATOR_ENV, "THP_MEM_ALLOC_ENABLE")},
    }
    if not on_cpu:
        extra = {
            "copy_bandwidth_gbs": common.copy_bandwidth_gbs(device),
            "note": "device run: speed sweep only (Condat, thread batches and the host codec are CPU-only)",
        }
    path = common.write_results(
        "prox", speed, extra, path=common.results_path("prox", device, args.out, args.quick), device=device
    )
    print(f"\nwrote {path}\n")
    print(
        common.markdown_table(
            speed,
            [
                "d",
                "ns/elem f32 anchored",
                "ns/elem f64 free",
                "condat ns/elem",
                "ours/condat",
                "cpu ns/elem f32 anchored",
                "condat cpu ns/elem",
                "f32 anchored/condat",
                "pg100 ns/elem",
                "pg100/ours",
                "pg100 rel. gap",
                "GB/s f32",
                "copy GB/s",
            ],
        )
    )
    print()
    sweep_cols = ["signal", "d", "dtype", "lam", "segments", "ours ms", "condat ms", "hybridtautstring ms"]
    sweep_cols += ["peer", "peer/ours", "peer/ours cpu", "max |ours-peer|", "batched 16 rows 1->2 thr", "torch.compile"]
    print(common.markdown_table(sweep, [c for c in sweep_cols if sweep and any(c in r for r in sweep)]))
    print()
    print(common.markdown_table(batch, list(batch[0].keys()) if batch else []))
    print()
    if codec:
        print(common.markdown_table(codec, list(codec[0].keys())))


if __name__ == "__main__":
    if any(k not in os.environ for k in ALLOCATOR_ENV):
        os.execve(sys.executable, common.rerun_argv(), {**ALLOCATOR_ENV, **os.environ})
    main()
