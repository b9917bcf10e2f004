"""The proximal l1-difference (csrc/prox): prox_tv1d and its backward."""

from __future__ import annotations

import time

import torch

import fedkernels

from .common import B, OpModel, record


def bytes_tv1d(elems, items, es):
    """z read once and u written once (2 es per element); one flag byte per item (the solver's chain scratch is not
    counted)."""
    return 2 * es * elems + items


def bytes_tv1d_backward(elems, items, es):
    """grad and u read once, grad z written once (3 es per element); one float64 lam gradient per item."""
    return 3 * es * elems + 8 * items


def torch_prox_tv1d(elems, es, iters=100):
    """bench pg_baseline (FISTA, 100 iterations): 30 element accesses per iteration (12 elementwise ops), 9 more around
    the loop."""
    return (30 * iters + 9) * elems * es


def torch_prox_tv1d_backward(elems, es, iters=100):
    """autograd through the same 100 iterations: each op's backward moves at least its forward's elements (lower bound
    = forward)."""
    return torch_prox_tv1d(elems, es, iters)


def prox_models(d: int, block_size: int) -> list[OpModel]:
    g = torch.Generator().manual_seed(0)
    z = torch.randn(d, generator=g)
    items = 1 if block_size == 0 else -(-d // block_size)
    cfg = f"d={d} f32 " + ("one row" if block_size == 0 else f"block_size={block_size}")
    out = []
    m = OpModel("prox_tv1d", cfg, how="execute=True (host reads the finiteness flags)")
    t0 = time.perf_counter()
    holder = {}
    m.launches = record(lambda: holder.setdefault("u", fedkernels.prox_tv1d(z, 1.0, True, block_size)), execute=True)
    m.how += f", {time.perf_counter() - t0:.1f} s emulated"
    m.kernel_bytes["tv1d_kernel"] = B(bytes_tv1d, d, items, 4)
    m.floor = (8 * d, "z read once, u written once.")
    m.torch = B(torch_prox_tv1d, d, 4)
    out.append(m)
    u = holder["u"]
    lam = torch.tensor(1.0)
    gu = torch.randn(d, generator=g)
    m = OpModel("prox_tv1d_backward", cfg, how="execute=True")
    m.launches = record(lambda: torch.ops.fedkernels.prox_tv1d_backward(gu, u, lam, True, block_size), execute=True)
    m.kernel_bytes["tv1d_backward_kernel"] = B(bytes_tv1d_backward, d, items, 4)
    m.floor = (12 * d, "grad and u read once, grad z written once.")
    m.torch = B(torch_prox_tv1d_backward, d, 4)
    out.append(m)
    return out
