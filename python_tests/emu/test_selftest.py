"""The CUDA emulator's own tests: its warp operations against a reference, and one deliberately
broken kernel (emu/selftest/broken_kernels.cu) for each detector, which must catch it.

They run where the emulator is loaded (`pytest --emulate-cuda`, as CI's emulator steps do); the
AddressSanitizer cases need the ASan build (`emu/emulate.py test --checks asan`), the race and
uninitialised-read reports the race-check build (`--checks race`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from python_tests import conftest

pytestmark = [
    pytest.mark.emu_direct,
    pytest.mark.skipif(not conftest.EMULATING, reason="needs the CUDA emulator (pytest --emulate-cuda)"),
]


def emu():
    from emu import cuda_emulator

    return cuda_emulator.loaded()


@pytest.fixture
def order(request: pytest.FixtureRequest):
    """Set the emulator's order for one test; the run's order comes back afterwards."""
    cfg = request.config

    def set_order(name: str, seed: int = 0) -> None:
        emu().set_order(name, seed)

    yield set_order
    emu().set_order(cfg.getoption("--emu-order"), cfg.getoption("--emu-seed"))


def warp_ops_reference(x: list[int]) -> list[list[int]]:
    out = []
    for t in range(64):
        w, lane = t // 32, t % 32
        warp = x[w * 32 : (w + 1) * 32]
        seg = (lane // 16) * 16
        up = warp[lane - 1] if lane - 1 >= seg else warp[lane]
        down = warp[lane + 3] if lane + 3 < 32 else warp[lane]
        idx = warp[(lane // 8) * 8 + 5]
        ballot = sum(1 << m for m in range(32) if warp[m] & 1)
        out.append(
            [sum(warp), up, down, idx, ballot, int(any(v > 60 for v in warp)), int(all(v >= 0 for v in warp)), sum(x)]
        )
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", ["forward", "reverse", "random"])
def test_warp_operations_match_reference(order, name: str, seed: int) -> None:
    order(name, seed)
    x = torch.randint(0, 64, (64,), generator=torch.Generator().manual_seed(seed))
    got = torch.ops.fk_emu_selftest.warp_ops(x)
    assert got.tolist() == warp_ops_reference(x.tolist())


def test_missing_barrier_is_caught(order) -> None:
    x = torch.arange(64, dtype=torch.float32)
    if emu().checks == "race":  # the race check reports it in any order
        order("forward")  # thread 0 reads before the others write
        with pytest.raises(RuntimeError, match="read of uninitialised __shared__ memory at byte 4 of __shared__ slots"):
            torch.ops.fk_emu_selftest.block_sum(x, 0)
        order("reverse")  # the others write first: the values are right, the missing order is not
        with pytest.raises(RuntimeError, match=r"write/read race .* __shared__ slots between thread 1 and thread 0"):
            torch.ops.fk_emu_selftest.block_sum(x, 0)
        return
    order("forward")  # thread 0 runs first: its sum reads poisoned slots
    assert torch.isnan(torch.ops.fk_emu_selftest.block_sum(x, 0))
    order("reverse")  # the order that hides the bug: only the race check sees it then
    assert torch.ops.fk_emu_selftest.block_sum(x, 0).item() == float(x.sum())


def test_uninitialised_shared_read_is_caught() -> None:
    x = torch.ones(64)
    if emu().checks == "race":
        with pytest.raises(RuntimeError, match="uninitialised __shared__"):
            torch.ops.fk_emu_selftest.block_sum(x, 1)
        return
    assert torch.isnan(torch.ops.fk_emu_selftest.block_sum(x, 1))  # the 0xFF poison shows the unwritten slot


@pytest.mark.parametrize(
    "variant, message", [(0, "divergent __syncthreads"), (1, "deadlock"), (2, "names lane 16, which has exited")]
)
def test_barrier_misuse_raises_instead_of_hanging(variant: int, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        torch.ops.fk_emu_selftest.barrier_misuse(torch.zeros(64), variant)


def test_deleted_syncthreads_in_label_hash_is_caught_by_thread_order(order) -> None:
    import fedkernels

    g = torch.Generator().manual_seed(0)
    counts = torch.randint(20, 60, (16,), generator=g)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])
    indices = torch.randint(0, 5000, (int(indptr[-1]),), generator=g)
    table = fedkernels.HashFamily(4, 64, 1).table(5000)
    want = fedkernels.label_hash(indptr, indices, table, 64)  # the CPU kernel (no routing in this test)
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    wrong_bytes = []
    for seed in range(4):
        order("random", seed)
        good = torch.ops.fedkernels.label_hash.default.redispatch(cuda, indptr, indices, table, 64)
        assert torch.equal(good, want)  # the real kernel, with its barrier, in the same orders
        bad = torch.ops.fk_emu_selftest.label_hash_no_barrier(indptr, indices, table, 64)
        wrong_bytes.append(int((bad != want).sum()))
    assert max(wrong_bytes) > 0, "random thread orders should expose the missing barrier"


def test_record_only_mode_records_without_running() -> None:
    import fedkernels
    from emu import cuda_emulator

    indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([7, 9, 5])
    table = fedkernels.HashFamily(2, 16, 0).table(10)
    out = torch.full((2, 2, 16), 7, dtype=torch.uint8)
    with cuda_emulator.routed_to_cuda(), cuda_emulator.recording(execute=False) as launches:
        fedkernels.label_hash(indptr, indices, table, 16, out=out)
    assert launches == [("label_hash_kernel", (2, 1, 1), (256, 1, 1))]
    assert bool((out == 7).all())  # no kernel body ran


ASAN_CHILD = """
import torch, fedkernels
from emu import cuda_emulator
cuda_emulator.load()
torch.ops.fk_emu_selftest.overflow(torch.zeros(10), {where})
print("no report")
"""


@pytest.mark.parametrize("where, report", [(0, "heap-buffer-overflow"), (1, "use-after-poison")])
def test_out_of_bounds_access_is_reported_by_asan(where: int, report: str) -> None:
    if emu().checks != "asan":
        pytest.skip("needs the ASan build of the emulator (emu/emulate.py test --checks asan)")
    child = subprocess.run(
        [sys.executable, "-c", ASAN_CHILD.format(where=where)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert child.returncode != 0 and "no report" not in child.stdout
    assert "AddressSanitizer" in child.stderr and report in child.stderr, child.stderr[-2000:]
