"""The emulator's source rewrite and its coverage check (pure Python: run everywhere)."""

from __future__ import annotations

import json
from pathlib import Path

from emu import coverage_check as emu_coverage
from emu import rewrite as emu_rewrite


def test_launch_rewrite_keeps_everything_else() -> None:
    src = (
        "  ns::k<T, acc_t><<<grid_for(n), 256, 0, at::cuda::getCurrentCUDAStream()>>>(a, f(b, c));\n"
        "  plain<<<1, 32>>>();\n"
    )
    out = emu_rewrite.rewrite(src)
    assert out == (
        '  ::fk_emu::launch("k", ns::k<T, acc_t>, ::fk_emu::Config(grid_for(n), 256, 0, '
        "at::cuda::getCurrentCUDAStream()), a, f(b, c));\n"
        '  ::fk_emu::launch("plain", plain, ::fk_emu::Config(1, 32));\n'
    )
    assert out.count("\n") == src.count("\n")  # lines stay where they were (the #line mapping holds)


def test_shared_declarations_become_references() -> None:
    src = (
        "  __shared__ ACC tile[kCols][kDims + 1];\n"
        "  __shared__ typename Reduce::TempStorage tmp;\n"
        "  // a __shared__ word in a comment; stays\n"
    )
    out = emu_rewrite.rewrite(src).splitlines()
    assert out[0] == (
        "  static ::fk_emu::SharedSlot fk_emu_slot_tile(sizeof(ACC[kCols][kDims + 1]), "
        'alignof(ACC[kCols][kDims + 1]), "tile"); ACC (&tile)[kCols][kDims + 1] = '
        "*reinterpret_cast<ACC (*)[kCols][kDims + 1]>(fk_emu_slot_tile.get());"
    )
    assert out[1].endswith(
        "typename Reduce::TempStorage &tmp = "
        "*reinterpret_cast<typename Reduce::TempStorage (*)>(fk_emu_slot_tmp.get());"
    )
    assert out[2] == "  // a __shared__ word in a comment; stays"


def test_global_kernel_names() -> None:
    src = (
        "// __global__ void in_comment(int);\n"
        "template <typename T>\n__global__ void __launch_bounds__(256, K <= 8 ? 4 : 2)\n  scan(const T* x) {}\n"
        "__global__ void plain_kernel(int n) {}\n/* __global__ void gone() */\n"
    )
    assert emu_rewrite.global_kernels(src) == ["scan", "plain_kernel"]


def test_every_project_kernel_is_found() -> None:
    names = emu_coverage.project_kernels()
    assert "label_hash_kernel" in names and "__launch_bounds__" not in names
    assert not any(n.startswith("__") for n in names)
    assert "missing_barrier_kernel" not in names  # the emulator's self-test kernels are not the project's


def test_coverage_merges_workers_and_names_the_missing(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "cov.json.gw0", tmp_path / "cov.json.gw1"
    a.write_text(json.dumps({"k1": 2}))
    b.write_text(json.dumps({"k1": 1, "k2": 5}))
    assert emu_coverage.merge_counts([a, b]) == {"k1": 3, "k2": 5}
    assert emu_coverage.never_launched({"k1", "k2", "k3"}, {"k1": 3, "k2": 5}) == ["k3"]
    required = sorted(emu_coverage.project_kernels())
    full = tmp_path / "full.json"
    full.write_text(json.dumps({k: 1 for k in required}))
    assert emu_coverage.main([str(full)]) == 0
    full.write_text(json.dumps({k: 1 for k in required[1:]}))
    assert emu_coverage.main([str(full)]) == 1
    assert f"never launched: {required[0]}" in capsys.readouterr().err
