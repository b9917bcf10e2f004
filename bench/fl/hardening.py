"""What safety costs: the checked payload decode and the atomic checkpoint against what a user would
write unchecked (``safetensors.torch.load`` / ``save_file``), same run, same payloads.

    PYTHONPATH=src python -m bench.fl.hardening [--mib 64] [--quick] [--out PATH]

Reports time ratios (checked / unchecked), payload GB/s against the measured copy bandwidth, and
peak extra memory. Writes build/bench-results/hardening.json (the committed table: ``--out
bench/results/fl/hardening.json``) and prints a markdown table. ``--quick``: 1 MiB payloads, few repeats.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save_file

from bench.common import copy_bandwidth_gbs, markdown_table, mib, peak_extra_bytes, results_path, timeit, write_results
from fedkernels.fl.checkpoint import save_checkpoint
from fedkernels.fl.payload import PayloadSpec, TensorSpec, decode, encode, state_spec


def payloads(total_mib: int) -> dict[str, tuple[dict[str, torch.Tensor], PayloadSpec]]:
    """A dense model update (one big layer + 200 small tensors) and a sparse ids/rows update."""
    g = torch.Generator().manual_seed(0)
    d = 256
    n_big = total_mib * 2**20 // 4 // d
    dense = {"big.weight": torch.randn(n_big, d, generator=g)}
    dense.update({f"layer{i}.bias": torch.randn(256, generator=g) for i in range(200)})
    rows = n_big // 2
    p = 4 * rows
    sparse = {"ids": torch.randperm(p, generator=g)[:rows].sort().values, "rows": torch.randn(rows, d, generator=g)}
    sparse_spec = PayloadSpec(
        {
            "ids": TensorSpec(torch.int64, ("n",), min_value=0, max_value=p, unique=True),
            "rows": TensorSpec(torch.float32, ("n", d)),
        }
    )
    return {"dense state": (dense, PayloadSpec(state_spec(dense))), "ids + rows": (sparse, sparse_spec)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=64, help="size of the big tensor of each payload")
    ap.add_argument("--out", type=Path, default=None, help="result JSON (default: build/bench-results/hardening.json)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 MiB payloads, a 16 MiB copy probe, few repeats")
    args = ap.parse_args()
    if args.quick:  # the quick settings become the defaults: explicit flags still win
        ap.set_defaults(mib=1)
        args = ap.parse_args()
    if args.mib < 1:
        ap.error(f"--mib must be at least 1, got {args.mib}")
    # quick: fewer repeats and a smaller copy probe (the full run's 256 MiB probe dominates at 1 MiB)
    reps = {"repeat": 3, "min_time": 0.0} if args.quick else {}
    copy = copy_bandwidth_gbs(nbytes=1 << 24) if args.quick else copy_bandwidth_gbs()
    rows = []
    for name, (tensors, spec) in payloads(args.mib).items():
        raw = encode(tensors)
        t_checked = timeit(lambda raw=raw, spec=spec: decode(raw, spec), **reps)
        t_plain = timeit(lambda raw=raw: st_load(raw), **reps)
        rows.append(
            {
                "case": f"decode {name}",
                "MiB": mib(len(raw)),
                "checked ms": 1e3 * t_checked,
                "unchecked ms": 1e3 * t_plain,
                "ratio": t_checked / t_plain,
                "checked GB/s": len(raw) / t_checked / 1e9,
                "copy GB/s": copy,
                "checked peak MiB": mib(peak_extra_bytes(lambda raw=raw, spec=spec: decode(raw, spec))),
                "unchecked peak MiB": mib(peak_extra_bytes(lambda raw=raw: st_load(raw))),
            }
        )
    dense = payloads(args.mib)["dense state"][0]
    nbytes = len(encode(dense))
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent) as tmp:
        ckpt, plain = Path(tmp) / "run.ckpt", Path(tmp) / "plain.safetensors"
        meta = {"round": 0, "history": []}
        t_atomic = timeit(lambda: save_checkpoint(ckpt, dense, meta), **{"repeat": 5, **reps})
        t_plain = timeit(lambda: save_file(dense, str(plain)), **{"repeat": 5, **reps})
    rows.append(
        {
            "case": "checkpoint dense state (atomic + fsync vs save_file)",
            "MiB": mib(nbytes),
            "checked ms": 1e3 * t_atomic,
            "unchecked ms": 1e3 * t_plain,
            "ratio": t_atomic / t_plain,
            "checked GB/s": nbytes / t_atomic / 1e9,
            "copy GB/s": copy,
        }
    )
    path = write_results(
        "hardening",
        rows,
        {
            "note": "shared 2-core machine: other builds ran at the same time; ratios within one run are what counts",
            "mib": args.mib,
            "quick": args.quick,
        },
        path=results_path("hardening", out=args.out),
    )
    print(
        markdown_table(
            rows,
            [
                "case",
                "MiB",
                "checked ms",
                "unchecked ms",
                "ratio",
                "checked GB/s",
                "copy GB/s",
                "checked peak MiB",
                "unchecked peak MiB",
            ],
        )
    )
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
