"""GPU model of every fedkernels CUDA kernel at the bench configurations, from launches the emulator records.

The model lives in emu/gpu_model/ (the emulator's wing, below bench/); this entry runs it like any bench
and writes its results as the benches do.

No GPU is needed: each op's CUDA launcher runs on host tensors under the CUDA execution emulator
(emu/cuda_emulator.py), which records every kernel launch (name, grid, block). For
each kernel the model prints blocks, threads, warps per SM on an H100 (132 SMs), the bytes the
kernel must move (an analytic minimum: inputs read once, outputs written once, by dtype) and the
time that takes at 3.35 TB/s (HBM3 peak: a lower bound), beside the same bound for the PyTorch
composition a user would write (the benches' compositions). Launch shapes are read as recorded,
never assumed, so kernels redesigned on other branches are modelled as they launch after a merge;
a kernel without a bytes function below still gets its launch row (bytes shown as "?").

    python emu/emulate.py build                           # prints the module path
    FK_CUDA_EMU_MODULE=<that path> PYTHONPATH=src python -m bench.ops.gpu_model [--quick]

Writes build/bench-results/gpu_model.json (gpu_model-quick.json with --quick; the committed table only
with ``--out bench/results/ops/gpu_model.json``) and prints markdown.

How each op is recorded (most ops record without running kernel bodies, execute=False):
- linear_cross_entropy at s = 131072: the launcher runs at::mm on the CPU per 512-class chunk even
  in record mode (minutes on 2 cores), so it is recorded at two small s (s1 < s2, same N and d);
  every launch's shape there is the same as at any s (rows map to blocks: the grid depends on N
  only, checked), and each kernel's launch count is affine in s, so it is extrapolated to s exactly
  (--exact-lce records at s itself: the same 257 forward and 256 backward launches, in about a minute).
- scatter_rows_mean reads its segment weight sums back on the host (the zero-weight check) between
  its two kernels, so it runs with execute=True (the emulator executes both kernels).
- prox_tv1d reads a finiteness flag back on the host: it runs with execute=True (one row of
  d = 1e7 is one emulated thread running the sequential solver: seconds).
- spreadout_loss is recorded as its parts: knn_classes, then spreadout_pair_loss (forward) and
  spreadout_pair_loss_backward on a valid neighbour table (in record mode knn's indices are
  uninitialised, and the pair loss validates them).
- masked_weighted_average: the bench's clients send the top half of tensors by delta norm, and
  with its i.i.d. updates (||delta|| ~ 0.01 sqrt(numel)) those are the largest tensors: the model
  sends those directly (4 clients, weights 1..4).

Caveats: warps/SM = all warps of one launch / 132 (what the launch offers the machine); at most 64
warps and 32 blocks are resident per SM, fewer when registers or shared memory limit occupancy
(the emulator cannot see either), so "waves" is an upper-bound-occupancy estimate. The bytes are
global-memory traffic at kernel boundaries (L2 reuse inside a kernel counts once); launchers also
run ATen ops on the device (sorts, segment builds, fills, reductions) that are not modelled, except
linear_cross_entropy's and knn_classes' cuBLAS GEMMs, which are listed as their own rows. The
GEMMs are compute-bound: their bandwidth bound is far below their real time (flops are given).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench import common as bench_common
from bench.ops.select_shapes import bert_base_shapes, resnet50_shapes
from emu.gpu_model.common import (
    FEW_WARPS_PER_SM,
    FP32_FLOPS,
    HBM_BYTES_PER_S,
    MAX_BLOCKS_PER_SM,
    MAX_WARPS_PER_SM,
    SMS,
)
from emu.gpu_model.report import build_models, flagged, markdown, rows_of, summary_markdown

# The parameter shapes the partial-exchange ops are modelled on (bench/ops/select_norms.py times the same).
MODEL_SHAPES = {"resnet50": resnet50_shapes, "bert-base": bert_base_shapes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small configurations (the test's run, seconds)")
    ap.add_argument(
        "--exact-lce",
        action="store_true",
        help="record linear_cross_entropy at the real s (minutes of host GEMMs) instead of extrapolating",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="JSON path (default build/bench-results/gpu_model.json, --quick: gpu_model-quick.json there)",
    )
    args = ap.parse_args(argv)
    if not os.environ.get("FK_CUDA_EMU_MODULE"):
        ap.error("set FK_CUDA_EMU_MODULE to the module `python emu/emulate.py build` prints")
    t0 = time.perf_counter()
    print(
        f"H100 model: {SMS} SMs, {HBM_BYTES_PER_S / 1e12:.2f} TB/s; recording launches "
        f"({'quick' if args.quick else 'bench'} configurations)",
        flush=True,
    )
    models = build_models(args.quick, MODEL_SHAPES, log=lambda s: print(s, flush=True), exact_lce=args.exact_lce)
    krows, orows = rows_of(models)
    print()
    print(markdown(krows, orows))
    print("\nPer op (fedkernels: its kernels' bytes, plus the LCE's cuBLAS GEMMs; torch: the composition):\n")
    print(summary_markdown(orows))
    flags = flagged(krows)
    print(f"\nLaunches offering fewer than {FEW_WARPS_PER_SM} warps per SM (⚠):")
    for f in flags:
        print(f"  - {f}")
    unknown = sorted({k["kernel"] for k in krows if k.get("blocks") is not None and k["bytes"] is None})
    if unknown:
        print(
            "\nKernels without a bytes function (add one beside the others; their ops' totals show ?): "
            + ", ".join(unknown)
        )
    compute = [k for k in krows if "flops" in k]
    if compute:
        print("\nCompute-bound rows (FP32 non-tensor peak 67 TFLOP/s; TF32 tensor cores are faster for the GEMMs):")
        for k in compute:
            print(
                f"  - {k['op']} [{k['config']}] {k['kernel']}: {k['flops']:.3g} flop -> >= {k['fp32_bound_us']:,.0f} µs"
            )
    notes = [(o["op"], o["config"], o["how"], o["note"]) for o in orows]
    print("\nHow each op was recorded / what is not modelled:")
    for op, cfg, how, note in notes:
        print(f"  - {op} [{cfg}]: {how}" + (f"; {note}" if note else ""))
    name = "gpu_model-quick" if args.quick else "gpu_model"
    extra = {
        "machine_model": {
            "gpu": "H100 SXM",
            "sms": SMS,
            "hbm_bytes_per_s": HBM_BYTES_PER_S,
            "max_warps_per_sm": MAX_WARPS_PER_SM,
            "max_blocks_per_sm": MAX_BLOCKS_PER_SM,
            "fp32_flops": FP32_FLOPS,
            "few_warps_per_sm": FEW_WARPS_PER_SM,
        },
        "ops": orows,
        "flagged": flags,
        "elapsed_s": time.perf_counter() - t0,
    }
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"benchmark": name, "rows": krows, **extra}, indent=2))
    else:
        path = bench_common.write_results(
            name, krows, extra, path=bench_common.results_path(name, out=None, quick=args.quick)
        )
    print(f"\nwrote {path} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
