"""python -m bench.ops.gpu_model --quick under the CUDA emulator: launches recorded for every op, H100 occupancy
arithmetic, the bytes functions against hand counts, and every __global__ kernel of csrc modelled."""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from python_tests.support.paths import ROOT
from python_tests.support.scripts import load_script

pytestmark = [
    pytest.mark.emu_direct,  # the model installs its own routing around each recorded call
    pytest.mark.skipif(
        not os.environ.get("FK_CUDA_EMU_MODULE"),
        reason="FK_CUDA_EMU_MODULE is not set: build the emulated CUDA module with "
        "`python emu/emulate.py build` and export the path it prints "
        "(CI's emulator step does)",
    ),
]

# The ops the model must cover (public op names; the kernels behind them are read from the launches).
OPS = {
    "hash_buckets",
    "label_hash",
    "bucket_merge",
    "bucket_merge_topk",
    "bucket_merge_backward",
    "count_sketch",
    "count_sketch_query",
    "sample_negatives",
    "sample_negatives_batched",
    "linear_cross_entropy",
    "linear_cross_entropy_backward",
    "scatter_rows_mean",
    "delta_norms",
    "select_topk_tensors",
    "masked_weighted_average",
    "prox_tv1d",
    "prox_tv1d_backward",
    "knn_classes",
    "pair_weight_gather",
    "spreadout_loss",
    "spreadout_loss backward",
    "linear_topk",
}


@pytest.fixture(scope="module")
def gpu_model():
    from emu import gpu_model as gm

    return gm


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One --quick run of the command, bench/ops/gpu_model.py: (its JSON, its stdout)."""
    command = load_script(ROOT / "bench" / "ops" / "gpu_model.py")
    out = tmp_path_factory.mktemp("gpu_model") / "gpu_model-quick.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert command.main(["--quick", "--out", str(out)]) == 0
    return json.loads(out.read_text()), buf.getvalue()


def test_every_op_produced_launches(quick_run):
    data, _ = quick_run
    ops = {o["op"] for o in data["ops"]}
    assert ops >= OPS, f"ops missing from the model: {sorted(OPS - ops)}"
    for o in data["ops"]:
        assert o["launches"] > 0, f"{o['op']} [{o['config']}] recorded no launch"
        assert o["kernels"] > 0


def test_every_global_kernel_is_modelled(quick_run):
    """Names come from the sources (emu/rewrite.py --kernels), so new kernels are picked up."""
    files = sorted(glob.glob(str(ROOT / "csrc" / "*" / "*.cu")) + glob.glob(str(ROOT / "csrc" / "*" / "*.cuh")))
    listed = subprocess.run(
        [sys.executable, str(ROOT / "emu" / "rewrite.py"), "--kernels", *files],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert listed, "emu/rewrite.py --kernels listed no kernel"
    data, stdout = quick_run
    modelled = {r["kernel"] for r in data["rows"] if "blocks" in r}
    missing = sorted(set(listed) - modelled)
    assert not missing, f"__global__ kernels never launched by the model: {missing}"
    table = stdout.split("\n| op |", 1)[1]
    for name in listed:
        assert f"| {name} |" in table, f"{name} not in the printed table"


def test_warps_per_sm_arithmetic(gpu_model):
    # 1024 blocks x 256 threads: 8 warps per block, 8192 warps, 8192 / 132 per SM; 8 blocks (64 warps)
    # resident per SM, so 1024 blocks fit in one wave of 132 x 8 = 1056.
    s = gpu_model.common.launch_stats((1024, 1, 1), (256, 1, 1))
    assert s["blocks"] == 1024 and s["threads_per_block"] == 256 and s["warps"] == 8192
    assert s["warps_per_sm"] == pytest.approx(8192 / 132)
    assert s["resident_warps_per_sm"] == 64 and s["waves"] == 1
    # 2-D grid, 48 threads = 2 warps (the last one partial); 32 blocks per SM is the cap: 10000 / (132 * 32) -> 3 waves
    s = gpu_model.common.launch_stats((5000, 2, 1), (48, 1, 1))
    assert s["blocks"] == 10000 and s["warps"] == 20000 and s["waves"] == 3
    assert s["warps_per_sm"] == pytest.approx(20000 / 132)
    assert s["resident_warps_per_sm"] == 64  # 32 blocks x 2 warps
    # one thread: 1 warp on one SM, 1/132 per SM, flagged
    s = gpu_model.common.launch_stats((1, 1, 1), (1, 1, 1))
    assert s["warps"] == 1 and s["warps_per_sm"] == pytest.approx(1 / 132) and s["resident_warps_per_sm"] == 1
    assert gpu_model.common.bound_us(3.35e12) == pytest.approx(1e6)  # 3.35 TB in one second


def test_rows_match_recorded_shapes(quick_run, gpu_model):
    data, _ = quick_run
    for r in data["rows"]:
        if "blocks" not in r:
            continue
        s = gpu_model.common.launch_stats(tuple(r["grid"]), tuple(r["block"]))
        assert r["warps_per_sm"] == pytest.approx(s["warps_per_sm"])
        assert r["warps_per_sm"] == pytest.approx(r["blocks"] * math.ceil(r["threads_per_block"] / 32) / 132)
        assert r["few_warps"] == (r["warps_per_sm"] < 4)
        if r["bytes"] is not None:
            assert r["bound_us"] == pytest.approx(r["bytes"] / 3.35e12 * 1e6)


def test_bytes_against_hand_counts(gpu_model):
    gm = gpu_model
    # bucket_merge, N=2 p=3 R=2 B=4 float32: logp 2*2*4*4 = 64, table 3*2*4 = 24, scores 2*3*4 = 24
    assert gm.sketch.bytes_bucket_merge(2, 3, 2, 4, 4) == 112
    # topk k=2: logp 64 + table 24 + 2 rows x 2 x (4 + 8) = 48
    assert gm.sketch.bytes_bucket_merge_topk(2, 3, 2, 4, 2, 4) == 136
    # count_sketch against real tensors: x [5, 7] f32, table [7, 3] int32, signs [7, 3] int8, out [5, 3, 11] f32
    x, table, signs = torch.zeros(5, 7), torch.zeros(7, 3, dtype=torch.int32), torch.zeros(7, 3, dtype=torch.int8)
    out = torch.zeros(5, 3, 11)
    want = sum(t.numel() * t.element_size() for t in (x, table, signs, out))
    assert gm.sketch.bytes_count_sketch(5, 7, 3, 11, 4) == want
    assert gm.sketch.bytes_count_sketch_query(5, 7, 3, 11, 4) == want
    # label_hash N=2 (3 labels), p=10 R=2 B=5: out 2*2*5 = 20, indptr 24, labels 24, table entries 3*2*4 = 24
    assert gm.sketch.bytes_label_hash(2, 3, 2, 5, 10) == 92
    # hash_buckets n=10 R=3: ids 80, params 96, buckets 120 + signs 30
    assert gm.sketch.bytes_hash_buckets(10, 3) == 80 + 96 + 150
    # scatter_rows_mean U=2 rows from T=3 sources, d=4 f32: src 48 + 36 (ids, weights) + 40 (per row) + out 32
    assert gm.sampled.bytes_scatter_rows_mean(2, 3, 4, 4) == 48 + 36 + 40 + 32
    # the knn composition, C=3 d=2 k=1: W twice 48, cdist 36, diagonal 12, topk reads 36, writes 3 x (4 + 8)
    assert gm.spread.torch_knn(3, 2, 1, 4) == 48 + 36 + 12 + 36 + 36
    # _foreach_sub + _foreach_norm over a 100-byte model of 2 tensors: 4 x 100 + 16
    assert gm.partial.torch_delta_norms(100, 2) == 416
    # linear_topk N=2 p=3 d=4 k=1 f32: h 32, W 48, out 2 x (4 + 8) = 24; the composition adds [N, p] written and read
    assert gm.topk.floor_linear_topk(2, 3, 4, 1, 4) == 32 + 48 + 24
    assert gm.topk.torch_linear_topk(2, 3, 4, 1, 4) == 32 + 48 + 2 * 24 + 24
    # 2 tiles: h read twice 64, W once 48, scores written once 24
    assert gm.topk.bytes_linear_topk_gemm(2, 3, 4, 2, 4) == 64 + 48 + 24
    # scores read 24; 2 tiles x 2 rows x 1 split x k=1 composites of 8 bytes, read and written: 64
    assert gm.topk.bytes_linear_topk_tile(2, 3, 1, 1, 2) == 24 + 64
    # merge 2 rows, k=3, 2 splits: 2 x 2 x 3 x 8 read + 2 x 3 x 8 written; finish: 2 x 3 x (8 + 4 + 8)
    assert gm.topk.bytes_linear_topk_merge(2, 3, 2) == 96 + 48
    assert gm.topk.bytes_linear_topk_finish(2, 3) == 120
    # every bytes / composition function documents why in one line
    for family in gm.FAMILIES:
        for name in dir(family):
            if name.startswith(("bytes_", "torch_", "floor_")):
                assert gm.common.why(getattr(family, name)), f"{family.__name__}.{name} has no one-line why"


def test_lce_extrapolation_is_exact(gpu_model):
    """Counts affine in s, one shape per kernel: recording at s itself gives the extrapolated launches."""
    f1, b1 = gpu_model.sampled._lce_record(64, 1024, 16)
    f2, b2 = gpu_model.sampled._lce_record(64, 2048, 16)
    f3, b3 = gpu_model.sampled._lce_record(64, 3072, 16)
    assert sorted(gpu_model.sampled.extrapolate(f1, f2, 1024, 2048, 3072)) == sorted(f3)
    assert sorted(gpu_model.sampled.extrapolate(b1, b2, 1024, 2048, 3072)) == sorted(b3)
