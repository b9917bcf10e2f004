"""The modelled machine (an NVIDIA H100 SXM), launch arithmetic, and recording launches under the emulator.

Bytes functions elsewhere in this package are analytic minima (inputs read once, outputs written once);
``es`` is the element size of the data dtype; int32 table entries are 4 bytes, int8 signs 1, int64 ids 8.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# ---- the machine: NVIDIA H100 SXM
SMS = 132
HBM_BYTES_PER_S = 3.35e12
FP32_FLOPS = 67e12  # non-tensor FP32 peak (for the compute-bound notes only)
WARP = 32
MAX_WARPS_PER_SM = 64
MAX_BLOCKS_PER_SM = 32
FEW_WARPS_PER_SM = 4  # flag launches that offer fewer warps than this per SM


def launch_stats(grid: tuple[int, int, int], block: tuple[int, int, int]) -> dict:
    """Blocks, threads, warps and per-SM occupancy of one launch on the H100."""
    blocks = grid[0] * grid[1] * grid[2]
    threads = block[0] * block[1] * block[2]
    warps_per_block = -(-threads // WARP)
    warps = blocks * warps_per_block
    # resident blocks per SM: 64 warps and 32 blocks at most (registers / shared memory may cut this further)
    blocks_per_sm = max(1, min(MAX_BLOCKS_PER_SM, MAX_WARPS_PER_SM // max(warps_per_block, 1)))
    return {
        "blocks": blocks,
        "threads_per_block": threads,
        "warps": warps,
        "warps_per_sm": warps / SMS,
        "resident_warps_per_sm": min(-(-blocks // SMS), blocks_per_sm) * warps_per_block,
        "waves": -(-blocks // (SMS * blocks_per_sm)),
    }


def bound_us(nbytes: float | None) -> float | None:
    """The time to move nbytes at 3.35 TB/s, in microseconds."""
    return None if nbytes is None else nbytes / HBM_BYTES_PER_S * 1e6


def why(fn: Callable) -> str:
    """A function's one-sentence why: its docstring's first paragraph, joined into one line."""
    return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())


def B(fn: Callable, *args) -> tuple[int, str]:
    """A bytes function's value and its one-line why."""
    return int(fn(*args)), why(fn)


@dataclass
class OpModel:
    op: str
    config: str
    launches: list = field(default_factory=list)  # (kernel, grid, block) as recorded (or extrapolated)
    kernel_bytes: dict = field(default_factory=dict)  # kernel -> (bytes over all its launches, why)
    extra_rows: list = field(default_factory=list)  # non-recorded device work we model (cuBLAS GEMMs)
    floor: tuple | None = None  # (bytes, why): the op's own inputs and outputs
    torch: tuple | None = None  # (bytes, why) of the PyTorch composition, None: none
    flops: dict = field(default_factory=dict)  # kernel -> flops (compute-bound kernels)
    how: str = "execute=False"
    note: str = ""


_EMU = None


def emulator():
    global _EMU
    if _EMU is None:
        from emu import cuda_emulator as emu

        emu.load()
        _EMU = emu
    return _EMU


def record(fn: Callable[[], object], execute: bool = False) -> list:
    """The launches of ``fn()`` with every fedkernels op routed to its emulated CUDA kernel."""
    emu = emulator()
    with emu.routed_to_cuda(), emu.recording(execute=execute) as launches:
        fn()
    return [(name, tuple(grid), tuple(block)) for name, grid, block in launches]


def grouped(launches: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for name, grid, block in launches:
        out.setdefault(name, []).append((grid, block))
    return out
