"""Per-call time of every public op at a small and a mid size, on CPU: the cost a build adds around the kernel.

A small call is mostly argument checks, allocation and dispatch; a mid call is mostly the kernel. The
script times whichever fedkernels the interpreter imports, so two builds (the stable-ABI wheel on two
torches, a source build of another commit) are compared by running it once under each and then::

    python -m bench.ops.call_overhead --out a.json           # under build A
    python -m bench.ops.call_overhead --out b.json           # under build B
    python -m bench.ops.call_overhead --compare a.json b.json
    python -m bench.ops.call_overhead --quick                # a smoke run (3 repeats)

``--compare`` prints B's median per-call time over A's for each op and size (above 1: B is slower).
Each time is the median of ``--repeats`` runs of a loop long enough to take about 20 ms.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

import fedkernels
from bench.common import results_path
from fedkernels import ops
from fedkernels.hashing import HashFamily

Case = tuple[str, str, Callable[[], object]]


def _csr(n: int, per_row: int, p: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    indptr = torch.arange(0, (n + 1) * per_row, per_row, dtype=torch.int64)
    return indptr, torch.randint(0, p, (n * per_row,), generator=g, dtype=torch.int64)


def sketch_cases(size: str, g: torch.Generator) -> list[Case]:
    n, p, r, b = (8, 1_000, 4, 64) if size == "small" else (64, 20_000, 4, 1_024)
    fam = HashFamily(r, b, seed=1)
    table = fam.table(p)
    signs = fam.sign(torch.arange(p)).to(torch.int8)
    indptr, indices = _csr(n, 3, p, g)
    logp = torch.randn(r, n, b, generator=g).log_softmax(-1)
    grad = torch.randn(n, p, generator=g)
    x = torch.randn(p, generator=g)
    sk = ops.count_sketch(x, table, signs, b)
    return [
        ("label_hash", size, lambda: ops.label_hash(indptr, indices, table, b)),
        ("bucket_merge", size, lambda: ops.bucket_merge(logp, table)),
        ("bucket_merge_topk", size, lambda: ops.bucket_merge_topk(logp, table, 5)),
        ("bucket_merge_backward", size, lambda: torch.ops.fedkernels.bucket_merge_backward(grad, table, b)),
        ("count_sketch", size, lambda: ops.count_sketch(x, table, signs, b)),
        ("count_sketch_query", size, lambda: ops.count_sketch_query(sk, table, signs)),
    ]


def hash_cases(size: str, g: torch.Generator) -> list[Case]:
    fam = HashFamily(4, 1_024, seed=3)
    ids = torch.randint(0, 1 << 40, (16 if size == "small" else 1 << 16,), generator=g, dtype=torch.int64)
    return [("hash_buckets", size, lambda: fam.buckets(ids))]


def prox_cases(size: str, g: torch.Generator) -> list[Case]:
    z = torch.randn(64 if size == "small" else 1 << 16, generator=g)
    return [("prox_tv1d", size, lambda: ops.prox_tv1d(z, 0.1))]


def sampled_cases(size: str, g: torch.Generator) -> list[Case]:
    n, d, c, m = (4, 16, 64, 8) if size == "small" else (64, 128, 4_096, 256)
    h = torch.randn(n, d, generator=g)
    w = torch.randn(c, d, generator=g)
    target = torch.randint(0, c, (n,), generator=g)
    positives = torch.randint(0, 10 * c, (n,), generator=g)
    indptr, indices = _csr(n, 2, 10 * c, g)
    out = torch.zeros(c, d)
    idx = torch.randint(0, c, (3 * m,), generator=g)  # three clients' rows, with repeats
    src = torch.randn(3 * m, d, generator=g)
    weight = torch.rand(3 * m, generator=g) + 0.5
    return [
        ("linear_cross_entropy", size, lambda: ops.linear_cross_entropy(h, w, target)),
        ("sample_negatives", size, lambda: ops.sample_negatives(positives, 10 * c, m, 7)),
        ("sample_negatives_batched", size, lambda: ops.sample_negatives_batched(indptr, indices, 10 * c, m, 7)),
        ("scatter_rows_mean", size, lambda: ops.scatter_rows_mean(out, idx, src, weight)),
    ]


def select_cases(size: str, g: torch.Generator) -> list[Case]:
    shapes = [(16,), (4, 4)] * 4 if size == "small" else [(256, 256), (4_096,)] * 4
    new = [torch.randn(s, generator=g) for s in shapes]
    old = [torch.randn(s, generator=g) for s in shapes]
    return [
        ("delta_norms", size, lambda: ops.delta_norms(new, old)),
        ("select_topk_tensors", size, lambda: ops.select_topk_tensors(new, old, 0.5)),
    ]


def spread_cases(size: str, g: torch.Generator) -> list[Case]:
    c, d, k = (32, 8, 4) if size == "small" else (1_024, 64, 10)
    w = torch.randn(c, d, generator=g)
    _, idx = ops.knn_classes(w, k)
    weight = torch.ones(idx.shape)
    return [
        ("knn_classes", size, lambda: ops.knn_classes(w, k)),
        ("spreadout_loss", size, lambda: ops.spreadout_loss(w, 1.0, k)),
        ("spreadout_pair_loss", size, lambda: ops.spreadout_pair_loss(w, idx, weight, 1.0)),
    ]


def topk_cases(size: str, g: torch.Generator) -> list[Case]:
    n, d, p = (4, 16, 256) if size == "small" else (64, 128, 16_384)
    h = torch.randn(n, d, generator=g)
    w = torch.randn(p, d, generator=g)
    return [("linear_topk", size, lambda: ops.linear_topk(h, w, k=5))]


FAMILIES = (sketch_cases, hash_cases, prox_cases, sampled_cases, select_cases, spread_cases, topk_cases)


def per_call_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median over ``repeats`` loops of the mean time of one call (the loop sized to about 20 ms)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    loops = max(1, int(0.02 / once))
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        runs.append((time.perf_counter() - t0) / loops)
    return statistics.median(runs)


def measure(repeats: int, only: set[str] | None) -> dict:
    g = torch.Generator().manual_seed(0)
    rows = []
    with torch.no_grad():
        for family in FAMILIES:
            for size in ("small", "mid"):
                for name, sz, fn in family(size, g):
                    if only and name not in only:
                        continue
                    rows.append({"op": name, "size": sz, "us": per_call_seconds(fn, repeats) * 1e6})
                    print(f"{name:26s} {sz:5s} {rows[-1]['us']:12.1f} us", flush=True)
    return {
        "torch": torch.__version__,
        "fedkernels": fedkernels.__file__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "rows": rows,
    }


def compare(a_path: str, b_path: str) -> None:
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    base = {(r["op"], r["size"]): r["us"] for r in a["rows"]}
    print(f"A: torch {a['torch']} {a['fedkernels']}\nB: torch {b['torch']} {b['fedkernels']}")
    print(f"{'op':26s} {'size':5s} {'A us':>10s} {'B us':>10s} {'B/A':>6s}")
    for r in b["rows"]:
        key = (r["op"], r["size"])
        if key in base:
            print(f"{r['op']:26s} {r['size']:5s} {base[key]:10.1f} {r['us']:10.1f} {r['us'] / base[key]:6.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the timings as JSON here (default build/bench-results/)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="3 repeats: a smoke run")
    ap.add_argument("--only", nargs="*", help="op names to time (default: all)")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="print B/A per op from two --out files")
    args = ap.parse_args(argv)
    if args.compare:
        compare(*args.compare)
        return 0
    result = measure(3 if args.quick else args.repeats, set(args.only) if args.only else None)
    path = results_path("call_overhead", out=args.out, quick=args.quick)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
