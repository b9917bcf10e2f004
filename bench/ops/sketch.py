"""Sketching microbenchmarks (FedMLH): fedkernels ops vs the PyTorch composition a user would write.

    python -m bench.ops.sketch            # the issue's configurations, N = 256 and 1024
                                      # (writes build/bench-results/sketch.json)
    python -m bench.ops.sketch --out bench/results/ops/sketch.json   # the committed table
    python -m bench.ops.sketch --quick    # two small configurations, N = 256 (under a minute)
    python -m bench.ops.sketch --quick --device cuda   # on a GPU; writes gpu-check/bench/sketch-quick.json
    python -m bench.ops.sketch --topk-launch   # bucket_merge_topk's CUDA launch shape per configuration (no GPU needed)

Per op, configuration and N: the op and its peers timed in one process, calls alternated, minimum of
5 or more each (bench/ops/peers.py alternating_min): the eager composition ("torch"), torch.compile of
it ("compiled"; one compiled function per op for the whole run, as a user would hold it, so later
shapes run torch.compile's automatic dynamic-shape recompile), and for count_sketch a CSVec-style
per-vector, per-table index_add_ ("csvec"). Then the speed-up over each, the peak extra memory of the
op and the eager composition, the op's achieved GB/s against the measured copy bandwidth (bytes =
every input read once + the output written once), and the op's 1-to-2-thread speed-up
(bench/ops/peers.py thread_scaling). bucket_merge_topk runs on two score distributions: "peaked"
(logsigmoid(2 z - 1), a trained model) and "flat" (log_softmax of z over the B buckets, as early in
training), z ~ N(0, 1); bucket_merge's work does not depend on the values (peaked only).
label_hash is measured twice: with a fresh output per call
("label_hash") and with both sides writing into a buffer reused across calls ("label_hash out=").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import fedkernels
from bench import common
from bench.ops import peers
from fedkernels import HashFamily

CONFIGS = [(3993, 4, 250), (30938, 4, 1000), (131073, 4, 4000), (312330, 8, 5000)]
QUICK_CONFIGS = CONFIGS[:2]
BATCHES = (256, 1024)  # N, the samples per call
QUICK_BATCHES = (256,)
DISTS = ("peaked", "flat")  # bucket score distributions for bucket_merge_topk
LABELS_PER_SAMPLE = 5  # label_hash input: 5 random labels per sample
TOPK = 5  # P@1..5 is what FedMLH reports
COUNT_SKETCH_ROWS = 64  # count_sketch input x: [64, p]
BASELINE_ROW_CHUNK = 128  # the merge compositions run in row chunks when [R, N, p] would exceed 2 GiB


# ---- the PyTorch compositions a user would write


def compose_label_hash(indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor, b: int) -> torch.Tensor:
    """Table lookup + scatter: ``z[j, n, table[l, j]] = 1``."""
    n, r, dev = indptr.numel() - 1, table.shape[1], indptr.device
    rows = torch.repeat_interleave(torch.arange(n, device=dev), indptr.diff())
    z = torch.zeros(r, n, b, dtype=torch.uint8, device=dev)
    z[torch.arange(r, device=dev)[None, :], rows[:, None], table[indices].long()] = 1
    return z


def compose_label_hash_into(
    buf: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor, b: int
) -> torch.Tensor:
    """The same composition writing into a reused ``[R, N, B]`` uint8 buffer: zero it, then index-put."""
    n, r, dev = indptr.numel() - 1, table.shape[1], indptr.device
    rows = torch.repeat_interleave(torch.arange(n, device=dev), indptr.diff())
    buf.zero_()
    buf[torch.arange(r, device=dev)[None, :], rows[:, None], table[indices].long()] = 1
    return buf


def _row_chunks(logp: torch.Tensor, p: int) -> int:
    r, n, _ = logp.shape
    return n if r * n * p * 4 <= 2 << 30 else BASELINE_ROW_CHUNK


def compose_merge(logp: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Gather + mean: ``[R, N, p]`` of gathered scores averaged over R."""
    idx = table.t().long()
    chunk = _row_chunks(logp, table.shape[0])
    outs = [
        torch.stack([logp[j, s : s + chunk][:, idx[j]] for j in range(logp.shape[0])]).mean(0)
        for s in range(0, logp.shape[1], chunk)
    ]
    return torch.cat(outs)


def compose_merge_topk(logp: torch.Tensor, table: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather + mean + topk."""
    idx = table.t().long()
    chunk = _row_chunks(logp, table.shape[0])
    vals, ids = [], []
    for s in range(0, logp.shape[1], chunk):
        scores = torch.stack([logp[j, s : s + chunk][:, idx[j]] for j in range(logp.shape[0])]).mean(0)
        v, i = torch.topk(scores, k)
        vals.append(v)
        ids.append(i)
    return torch.cat(vals), torch.cat(ids)


def compose_count_sketch(x: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, b: int) -> torch.Tensor:
    """index_add per table: ``M[:, j].index_add_(1, table[:, j], x * signs[:, j])``."""
    r = table.shape[1]
    m = torch.zeros(x.shape[0], r, b, dtype=x.dtype, device=x.device)
    for j in range(r):
        m[:, j].index_add_(1, table[:, j].long(), x * signs[:, j].to(x.dtype))
    return m


def csvec_count_sketch(x: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, b: int) -> torch.Tensor:
    """The CSVec library's way: one sketch per vector, ``table[j].index_add_(0, buckets[j], signs[j] * vec)``."""
    r = table.shape[1]
    buckets = [table[:, j].long() for j in range(r)]
    sgn = [signs[:, j].to(x.dtype) for j in range(r)]
    m = torch.zeros(x.shape[0], r, b, dtype=x.dtype, device=x.device)
    for i in range(x.shape[0]):
        for j in range(r):
            m[i, j].index_add_(0, buckets[j], sgn[j] * x[i])
    return m


def bucket_scores(dist: str, r: int, n: int, b: int, g: torch.Generator) -> torch.Tensor:
    """``[R, N, B]`` log-probabilities: "peaked" logsigmoid(2 z - 1), "flat" log_softmax(z) over B; z ~ N(0, 1)."""
    z = torch.randn(r, n, b, generator=g)
    if dist == "peaked":
        return F.logsigmoid(2 * z - 1)
    if dist == "flat":
        return F.log_softmax(z, dim=-1)
    raise ValueError(f"dist must be 'peaked' or 'flat', got {dist!r}")


def compose_query_median(m: torch.Tensor, table: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """Gather the R signed estimates, sort, take the middle (mean of the two middle for even R)."""
    r = table.shape[1]
    vals = torch.stack([m[:, j][:, table[:, j].long()] * signs[:, j].to(m.dtype) for j in range(r)]).sort(0).values
    return vals[r // 2] if r % 2 else (vals[r // 2 - 1] + vals[r // 2]) * 0.5


# ---- measurement


_COMPILED: dict[str, Callable] = {}  # one torch.compile object per composition for the whole run


def compiled(name: str, fn: Callable, *args: object) -> tuple[Callable[[], object] | str, str]:
    """torch.compile of ``fn`` (one compiled object per ``name``), warmed up on ``args`` outside any timing.

    Returns ``(call, "ok")`` or ``(why it failed, why)``.
    """
    if name not in _COMPILED:
        cfn, why = peers.compiled_peer(fn, *args)
        if cfn is None:
            return why, why
        _COMPILED[name] = cfn
    cfn = _COMPILED[name]
    try:
        for _ in range(2):
            cfn(*args)
    except Exception as e:  # a recompile for a new shape can fail too
        why = f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return why, why
    return (lambda: cfn(*args)), "ok"


def measure(
    name: str,
    config: tuple[int, int, int],
    n: int,
    ours: Callable[[], object],
    theirs: dict[str, Callable[[], object] | str],
    nbytes: int,
    copy_gbs: float,
    slow: bool,
    device: str = "cpu",
    **extra: object,
) -> dict:
    """One row: ours and each peer in ``theirs`` (a callable, or a string saying why it cannot run),
    alternated, minimum of 5; ``theirs["torch"]`` is the eager composition (its memory is measured too)."""
    runnable = {k: v for k, v in theirs.items() if callable(v)}
    best = peers.alternating_min({"ours": ours, **runnable}, repeat=5, warmup=0 if slow else 1)
    scaling = peers.thread_scaling(ours, repeat=5) if device == "cpu" else {}
    mem_ours = common.peak_extra_bytes(ours, device)
    mem_theirs = common.peak_extra_bytes(theirs["torch"], device)  # type: ignore[arg-type]
    gbs = nbytes / best["ours"] / 1e9
    p, r, b = config
    row: dict = {"op": name, "p": p, "R": r, "B": b, "N": n, **extra, "ours_ms": 1e3 * best["ours"]}
    for peer, fn in theirs.items():
        if callable(fn):
            row[f"{peer}_ms"] = 1e3 * best[peer]
            row["speedup" if peer == "torch" else f"vs_{peer}"] = best[peer] / best["ours"]
        else:
            row[f"{peer}_ms"] = None
            row["speedup" if peer == "torch" else f"vs_{peer}"] = None
            row[f"{peer}_why"] = fn
    row.update(
        {
            "ours_extra_MiB": common.mib(mem_ours),
            "torch_extra_MiB": common.mib(mem_theirs),
            "GB/s": gbs,
            "%copy": 100 * gbs / copy_gbs,
        }
    )
    if scaling:
        row.update(
            {"ours_1t_ms": 1e3 * scaling["t1_s"], "ours_2t_ms": 1e3 * scaling["t2_s"], "2t/1t": scaling["speedup"]}
        )
    peer_txt = "  ".join(
        f"{k} x{row['speedup' if k == 'torch' else 'vs_' + k]:.1f}" if callable(v) else f"{k} n/a"
        for k, v in theirs.items()
    )
    what = f"{name} ({extra['dist']})" if "dist" in extra else name
    print(
        f"  {what:26s} p={p:<7d} N={n:<5d} ours {row['ours_ms']:9.2f} ms  {peer_txt}  "
        f"mem {row['ours_extra_MiB']:7.1f} / {row['torch_extra_MiB']:7.1f} MiB  {gbs:6.2f} GB/s "
        f"({row['%copy']:.0f}% copy)" + (f"  2t/1t {row['2t/1t']:.2f}" if scaling else ""),
        flush=True,
    )
    return row


def check_same(a: torch.Tensor, b: torch.Tensor, what: str, exact: bool = True) -> None:
    ok = torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-4, atol=1e-4)
    if not ok:
        raise AssertionError(f"{what}: fedkernels and the composition disagree")


LABEL_HASH_OUT = "label_hash out="  # row name of the reused-buffer measurement (run with --ops label_hash)
VARIANT_FRESH = "fresh output"
VARIANT_OUT = "reused buffer"
OPS = ("label_hash", "bucket_merge", "bucket_merge_topk", "count_sketch", "count_sketch_query")


def bench_config(
    config: tuple[int, int, int],
    n: int,
    copy_gbs: float,
    seed: int = 0,
    ops: tuple[str, ...] = OPS,
    device: str = "cpu",
    count_sketches: bool = True,
) -> list[dict]:
    """Rows for one (p, R, B) and N: inputs drawn on the CPU (same values on every device), then moved to ``device``.

    ``count_sketches``: also the count_sketch rows (their input x [64, p] does not depend on N).
    """
    p, r, b = config
    g = torch.Generator().manual_seed(seed)
    hf = HashFamily(r, b, seed)
    table, signs = hf.table(p).to(device), hf.signs(p).to(device)
    slow = p * r * n > 100_000_000
    rows = []

    # label_hash: N samples with LABELS_PER_SAMPLE labels each
    indptr = torch.arange(0, (n + 1) * LABELS_PER_SAMPLE, LABELS_PER_SAMPLE, dtype=torch.int64).to(device)
    indices = torch.randint(0, p, (n * LABELS_PER_SAMPLE,), generator=g).to(device)
    check_same(
        fedkernels.label_hash(indptr, indices, table, b), compose_label_hash(indptr, indices, table, b), "label_hash"
    )
    nbytes = r * n * b + indptr.numel() * 8 + indices.numel() * (8 + 4 * r)
    if "label_hash" in ops:
        # (1) fresh output every call, as a one-off caller gets it; (2) both sides write into a buffer
        # reused across calls, as a training loop can (no page faults for outputs above the mmap threshold)
        comp, _ = compiled("label_hash", compose_label_hash, indptr, indices, table, b)
        row = measure(
            "label_hash",
            config,
            n,
            lambda: fedkernels.label_hash(indptr, indices, table, b),
            {"torch": lambda: compose_label_hash(indptr, indices, table, b), "compiled": comp},
            nbytes,
            copy_gbs,
            False,
            device,
        )
        rows.append({**row, "variant": VARIANT_FRESH})
        buf_ours = torch.empty(r, n, b, dtype=torch.uint8, device=device)
        buf_theirs = torch.empty(r, n, b, dtype=torch.uint8, device=device)
        buf_comp = torch.empty(r, n, b, dtype=torch.uint8, device=device)
        check_same(
            fedkernels.label_hash(indptr, indices, table, b, out=buf_ours),
            compose_label_hash_into(buf_theirs, indptr, indices, table, b),
            "label_hash out=",
        )
        comp, _ = compiled("label_hash_into", compose_label_hash_into, buf_comp, indptr, indices, table, b)
        row = measure(
            LABEL_HASH_OUT,
            config,
            n,
            lambda: fedkernels.label_hash(indptr, indices, table, b, out=buf_ours),
            {"torch": lambda: compose_label_hash_into(buf_theirs, indptr, indices, table, b), "compiled": comp},
            nbytes,
            copy_gbs,
            False,
            device,
        )
        rows.append({**row, "variant": VARIANT_OUT})

    # merges: bucket scores of N samples, per distribution
    for dist in DISTS:
        logp = bucket_scores(dist, r, n, b, g).to(device)
        logp_bytes = logp.numel() * 4 + table.numel() * 4
        # bit-identical scores for the mean? the composition's mean(0) may add in another order: allclose
        if "bucket_merge" in ops and dist == "peaked":  # its work does not depend on the values
            check_same(
                fedkernels.bucket_merge(logp[:, :64], table),
                compose_merge(logp[:, :64], table),
                "bucket_merge",
                exact=False,
            )
            comp, _ = compiled("bucket_merge", compose_merge, logp, table)
            rows.append(
                measure(
                    "bucket_merge",
                    config,
                    n,
                    lambda logp=logp: fedkernels.bucket_merge(logp, table),
                    {"torch": lambda logp=logp: compose_merge(logp, table), "compiled": comp},
                    logp_bytes + n * p * 4,
                    copy_gbs,
                    slow,
                    device,
                )
            )
        if "bucket_merge_topk" in ops:
            got_v, _ = fedkernels.bucket_merge_topk(logp[:, :64], table, TOPK)
            want_v, _ = compose_merge_topk(logp[:, :64], table, TOPK)
            check_same(got_v, want_v, "bucket_merge_topk values", exact=False)
            comp, _ = compiled("bucket_merge_topk", compose_merge_topk, logp, table, TOPK)
            rows.append(
                measure(
                    "bucket_merge_topk",
                    config,
                    n,
                    lambda logp=logp: fedkernels.bucket_merge_topk(logp, table, TOPK),
                    {"torch": lambda logp=logp: compose_merge_topk(logp, table, TOPK), "compiled": comp},
                    logp_bytes + n * TOPK * 12,
                    copy_gbs,
                    slow,
                    device,
                    dist=dist,
                )
            )

    # count sketch of COUNT_SKETCH_ROWS vectors of length p (independent of N: the caller asks for it once)
    x = torch.randn(COUNT_SKETCH_ROWS, p, generator=g).to(device)
    sk_bytes = x.numel() * 4 + table.numel() * 5 + COUNT_SKETCH_ROWS * r * b * 4
    if "count_sketch" in ops and count_sketches:
        want = fedkernels.count_sketch(x, table, signs, b)
        check_same(want, compose_count_sketch(x, table, signs, b), "count_sketch", exact=False)
        check_same(want, csvec_count_sketch(x, table, signs, b), "count_sketch (csvec)", exact=False)
        comp, _ = compiled("count_sketch", compose_count_sketch, x, table, signs, b)
        rows.append(
            measure(
                "count_sketch",
                config,
                COUNT_SKETCH_ROWS,
                lambda: fedkernels.count_sketch(x, table, signs, b),
                {
                    "torch": lambda: compose_count_sketch(x, table, signs, b),
                    "compiled": comp,
                    "csvec": lambda: csvec_count_sketch(x, table, signs, b),
                },
                sk_bytes,
                copy_gbs,
                False,
                device,
            )
        )
    if "count_sketch_query" in ops and count_sketches:
        m = fedkernels.count_sketch(x, table, signs, b)
        check_same(
            fedkernels.count_sketch_query(m, table, signs), compose_query_median(m, table, signs), "count_sketch_query"
        )
        comp, _ = compiled("count_sketch_query", compose_query_median, m, table, signs)
        rows.append(
            measure(
                "count_sketch_query",
                config,
                COUNT_SKETCH_ROWS,
                lambda: fedkernels.count_sketch_query(m, table, signs),
                {"torch": lambda: compose_query_median(m, table, signs), "compiled": comp},
                sk_bytes,
                copy_gbs,
                False,
                device,
            )
        )
    return rows


GOAL_CONFIG = (131073, 4, 4000)  # the bucket_merge_topk configuration


def topk_thread_rows(batches: tuple[int, ...], device: str, threads: tuple[int, ...] = (1, 2)) -> list[dict]:
    """bucket_merge_topk vs the eager composition at GOAL_CONFIG, each distribution, N and thread count
    (the goal asks for 1 and 2 threads; the main rows run at the session's thread count)."""
    p, r, b = GOAL_CONFIG
    table = HashFamily(r, b, 0).table(p).to(device)
    g = torch.Generator().manual_seed(1)
    before = torch.get_num_threads()
    out = []
    try:
        for n in batches:
            for dist in DISTS:
                logp = bucket_scores(dist, r, n, b, g).to(device)
                for t in threads:
                    torch.set_num_threads(t)
                    best = peers.alternating_min(
                        {
                            "ours": lambda logp=logp: fedkernels.bucket_merge_topk(logp, table, TOPK),
                            "torch": lambda logp=logp: compose_merge_topk(logp, table, TOPK),
                        },
                        repeat=5,
                        warmup=0,
                    )
                    row = {"dist": dist, "N": n, "threads": t, "ours_ms": 1e3 * best["ours"]}
                    row.update({"torch_ms": 1e3 * best["torch"], "speedup": best["torch"] / best["ours"]})
                    print(
                        f"  bucket_merge_topk {GOAL_CONFIG} {dist:6s} N={n:<5d} {t} thread(s): "
                        f"ours {row['ours_ms']:8.2f} ms  torch {row['torch_ms']:8.2f} ms  x{row['speedup']:.1f}",
                        flush=True,
                    )
                    out.append(row)
    finally:
        torch.set_num_threads(before)
    return out


def goals(rows: list[dict], thread_rows: list[dict]) -> list[dict]:
    """The issues' goals, evaluated on this run's rows."""
    out = []
    for row in thread_rows:
        out.append(
            {
                "goal": f"bucket_merge_topk >= 5x the composition at {GOAL_CONFIG}, {row['dist']} scores, "
                f"N = {row['N']}, {row['threads']} thread(s)",
                "value": row["speedup"],
                "met": row["speedup"] >= 5,
            }
        )
    for op in ("label_hash", LABEL_HASH_OUT, "count_sketch"):
        for row in rows:
            if row["op"] == op:
                what = f"{op} ({row['variant']})" if "variant" in row else op
                out.append(
                    {
                        "goal": f"{what} >= 60% of copy bandwidth at p={row['p']}, N={row['N']}",
                        "value": row["%copy"],
                        "met": row["%copy"] >= 60,
                    }
                )
    return out


# ---- bucket_merge_topk's CUDA launch (csrc/sketch/merge_topk_cuda.cu) at the bench sizes, on an H100
# (132 SMs, 3.35 TB/s HBM3). No GPU measures it here: the shape follows the launcher's rule (mirrored
# below; python_tests/ops/sketch/test_topk.py checks the mirror against the emulator's launch record) and
# the time is the memory-bound floor: logp read once (N R B 4 bytes), the table once (p R 4), the
# output written once (N k 12). At N = 1024, k = 5 (`python -m bench.ops.sketch --topk-launch` prints it):
#
# | p      | R | B    | blocks x threads | splits | warps/SM (grid) | resident | row staged  | MB moved | floor us |
# |--------|---|------|------------------|--------|-----------------|----------|-------------|----------|----------|
# | 3993   | 4 | 250  | 1024 x 256       | 1      | 62.1            | 32       | yes (4 KB)  | 4.22     | 1.26     |
# | 30938  | 4 | 1000 | 1024 x 256       | 1      | 62.1            | 32       | yes (16 KB) | 16.94    | 5.06     |
# | 131073 | 4 | 4000 | 1024 x 256       | 1      | 62.1            | 32       | no (64 KB)  | 67.69    | 20.21    |
# | 312330 | 8 | 5000 | 1024 x 256       | 1      | 62.1            | 32       | no (160 KB) | 173.90   | 51.91    |
#
# "warps/SM (grid)" is the grid's warps over 132 SMs; "resident" what registers allow at once (k <= 8:
# __launch_bounds__(256, 4), 64 registers, so 4 blocks of 8 warps; k <= 32: 2 blocks). The floor
# assumes every gather of logp hits on chip: true where the row is staged in shared memory (R B <= 8192
# floats); at the two large configurations the row (64 KB, 160 KB) exceeds the 48 KB of static shared
# memory and the N p R gathers (0.54 G and 2.56 G) go through L1/L2, so those will sit above the floor.
# The table is read once per row too: N p R 4 bytes from L2 (from tens of MB to GBs across the four
# configurations), which even at the L2's rate, a small multiple of HBM's, takes longer than the HBM
# floor everywhere. Sharing each table read among several rows of a block (G rows per block: table
# traffic / G) is the next step; it needs per-row lists per thread (registers) or dynamic shared memory,
# which the emulator does not model yet.

H100_SMS = 132
H100_HBM_TBS = 3.35
TOPK_THREADS, TOPK_STAGE_FLOATS, TOPK_TARGET_BLOCKS, TOPK_MIN_CLASSES, TOPK_MAX_SPLITS = 256, 8192, 528, 8, 256


def topk_cuda_launch(p: int, r: int, b: int, n: int, k: int) -> dict:
    """The fast path's launch (k <= 32, float/half/bfloat16), as topk_launch in merge_topk_cuda.cu decides it."""
    splits = 1
    if n < TOPK_TARGET_BLOCKS:
        by_rows = -(-TOPK_TARGET_BLOCKS // n)
        by_work = max(1, p // (TOPK_THREADS * TOPK_MIN_CLASSES))
        splits = max(1, min(TOPK_MAX_SPLITS, by_rows, by_work))
    split_len = -(-p // splits)
    splits = -(-p // split_len)
    blocks = n * splits
    resident_blocks = 4 if k <= 8 else 2
    nbytes = n * r * b * 4 + p * r * 4 + n * k * 12
    return {
        "p": p,
        "R": r,
        "B": b,
        "N": n,
        "k": k,
        "blocks": blocks,
        "threads": TOPK_THREADS,
        "splits": splits,
        "merge_threads": 32 * -(-splits // 32) if splits > 1 else 0,
        "warps_per_SM": blocks * TOPK_THREADS / 32 / H100_SMS,
        "resident_warps_per_SM": min(blocks / H100_SMS, resident_blocks) * TOPK_THREADS / 32,
        "row_staged": r * b <= TOPK_STAGE_FLOATS,
        "MB": nbytes / 1e6,
        "floor_us": nbytes / (H100_HBM_TBS * 1e12) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two small configurations, N = 256")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's choice)")
    ap.add_argument(
        "--batches",
        default=",".join(map(str, BATCHES)),
        help="comma-separated N for the main rows (default 256,1024; the 1-and-2-thread bucket_merge_topk "
        "goal rows always use 256,1024)",
    )
    ap.add_argument(
        "--ops",
        default=",".join(OPS),
        help="comma-separated subset of " + ", ".join(OPS) + " (a subset writes sketch-<ops>.json)",
    )
    common.add_device_arguments(ap)
    ap.add_argument(
        "--topk-launch",
        action="store_true",
        help="print bucket_merge_topk's CUDA launch shape and HBM-bound time per config, and exit",
    )
    args = ap.parse_args(argv)
    if args.topk_launch:
        n = 256 if args.quick else 1024
        shapes = [topk_cuda_launch(p, r, b, n, TOPK) for p, r, b in (QUICK_CONFIGS if args.quick else CONFIGS)]
        print(
            common.markdown_table(
                shapes,
                [
                    "p",
                    "R",
                    "B",
                    "N",
                    "k",
                    "blocks",
                    "threads",
                    "splits",
                    "merge_threads",
                    "warps_per_SM",
                    "resident_warps_per_SM",
                    "row_staged",
                    "MB",
                    "floor_us",
                ],
            )
        )
        return 0
    device = common.check_device_arguments(ap, args)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    configs, batches = (QUICK_CONFIGS, QUICK_BATCHES) if args.quick else (CONFIGS, BATCHES)
    if not args.quick:
        batches = tuple(int(v) for v in args.batches.split(",") if v)
    ops = tuple(o for o in args.ops.split(",") if o)
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        ap.error(f"unknown ops {unknown}; choose from {', '.join(OPS)}")
    torch.manual_seed(0)
    copy_gbs = common.copy_bandwidth_gbs(device)
    print(
        f"device {device}, copy bandwidth {copy_gbs:.1f} GB/s, {torch.get_num_threads()} threads, "
        f"N = {batches}, k = {TOPK}, "
        f"load average {Path('/proc/loadavg').read_text().split()[0]}"
    )
    rows = []
    for n in batches:
        for config in configs:
            rows += bench_config(config, n, copy_gbs, ops=ops, device=device, count_sketches=n == batches[0])
    thread_rows = []
    if "bucket_merge_topk" in ops and not args.quick:
        print(f"\nbucket_merge_topk at {GOAL_CONFIG}, 1 and 2 threads:")
        thread_rows = topk_thread_rows(BATCHES, device)
    goal_rows = goals(rows, thread_rows)
    name = "sketch-quick" if args.quick else "sketch"
    if set(ops) != set(OPS):
        name += "-" + "-".join(ops)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None
    path = common.write_results(
        name,
        rows,
        {
            "copy_bandwidth_gbs": copy_gbs,
            "N": list(batches),
            "topk_threads_N": list(BATCHES),
            "k": TOPK,
            "topk_threads": thread_rows,
            "loadavg_at_end": load,
            "count_sketch_rows": COUNT_SKETCH_ROWS,
            "goals": goal_rows,
        },
        path=common.results_path(name, device, args.out, args.quick),
        device=device,
    )
    cols = ["op", "dist", "p", "R", "B", "N", "ours_ms", "torch_ms", "speedup", "compiled_ms", "vs_compiled"]
    cols += ["csvec_ms", "vs_csvec", "2t/1t", "ours_extra_MiB", "torch_extra_MiB", "GB/s", "%copy"]
    print()
    print(common.markdown_table(rows, cols))
    if any(row["op"] == LABEL_HASH_OUT for row in rows):
        print(
            "\nlabel_hash: a fresh output every call (both sides). label_hash out=: one buffer per side reused "
            "across calls (ours: label_hash(..., out=buf); torch: buf.zero_() then the same index-put into buf)."
        )
    why = {f"{k}: {v}" for row in rows for k, v in row.items() if k.endswith("_why")}
    for line in sorted(why):
        print(f"peer not run, {line}")
    if thread_rows:
        print()
        print(common.markdown_table(thread_rows, ["dist", "N", "threads", "ours_ms", "torch_ms", "speedup"]))
    print()
    print(common.markdown_table(goal_rows, ["goal", "value", "met"]))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
