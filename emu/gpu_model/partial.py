"""Partial weight exchange (csrc/select): delta_norms, select_topk_tensors, masked_weighted_average."""

from __future__ import annotations

import math

import torch

import fedkernels

from .common import B, OpModel, launch_stats, record
from .configs import PARTIAL_CLIENTS, PARTIAL_FRACTION


def bytes_norm_partials(model_bytes, chunks):
    """new and old read once each (2x the model's bytes); one float64 partial per chunk written (the packed plan is
    small)."""
    return 2 * model_bytes + 8 * chunks


def bytes_norm_finish(m, chunks):
    """the chunk partials read once (8 per chunk); one float32 norm per tensor written (4 M)."""
    return 8 * chunks + 4 * m


def bytes_topk_rank(m, k):
    """the M float32 norms read once (the O(M^2) re-reads hit cache); k int64 indices written."""
    return 4 * m + 8 * k


def bytes_masked(sent_bytes, written_bytes):
    """every sent tensor read once; every tensor some client sent written once."""
    return sent_bytes + written_bytes


def torch_delta_norms(model_bytes, m):
    """bench _foreach_norm(_foreach_sub(new, old)): the differences written and read again (4x the model), M norms."""
    return 4 * model_bytes + 8 * m


def torch_select_topk(model_bytes, m):
    """bench foreach norms + sort(descending, stable): 4x the model, then M norms sorted (values and int64 indices)."""
    return torch_delta_norms(model_bytes, m) + 4 * m + 12 * m


def torch_masked_average(elems_by_contributors):
    """bench loop_average: per tensor with c senders, c products, the running sum (0 + t1, then c - 1 adds), the
    division, copy_: (5 c + 3) n floats."""
    return sum(4 * (5 * c + 3) * n for c, n in elems_by_contributors)


Shape = tuple[int, ...]


def partial_models(model: str, shapes: list[Shape], dtypes: list[torch.dtype]) -> list[OpModel]:
    """delta_norms and select_topk_tensors per dtype, and masked_weighted_average, on a network named ``model``
    whose parameter tensors have ``shapes``."""
    out = []
    for dtype in dtypes:
        es = torch.empty((), dtype=dtype).element_size()
        new = [torch.empty(s, dtype=dtype) for s in shapes]
        old = [torch.empty(s, dtype=dtype) for s in shapes]
        model_bytes = sum(x.numel() for x in new) * es
        tname = str(dtype).replace("torch.", "")
        mcount = len(shapes)
        m = OpModel("delta_norms", f"{model} M={mcount} {tname}")
        m.launches = record(lambda new=new, old=old: fedkernels.delta_norms(new, old))
        chunks = sum(launch_stats(gr, bl)["blocks"] for name, gr, bl in m.launches if name == "norm_partials_kernel")
        m.kernel_bytes["norm_partials_kernel"] = B(bytes_norm_partials, model_bytes, chunks)
        m.kernel_bytes["norm_finish_kernel"] = B(bytes_norm_finish, mcount, chunks)
        m.floor = (2 * model_bytes + 4 * mcount, "new and old read once; M float32 norms written.")
        m.torch = B(torch_delta_norms, model_bytes, mcount)
        out.append(m)

        k = fedkernels.num_selected(mcount, 0.1)
        m = OpModel("select_topk_tensors", f"{model} M={mcount} {tname} fraction=0.1")
        m.launches = record(lambda new=new, old=old: fedkernels.select_topk_tensors(new, old, 0.1))
        m.kernel_bytes["norm_partials_kernel"] = B(bytes_norm_partials, model_bytes, chunks)
        m.kernel_bytes["norm_finish_kernel"] = B(bytes_norm_finish, mcount, chunks)
        m.kernel_bytes["topk_rank_kernel"] = B(bytes_topk_rank, mcount, k)
        m.floor = (2 * model_bytes + 8 * k, "new and old read once; k int64 indices written.")
        m.torch = B(torch_select_topk, model_bytes, mcount)
        out.append(m)
        del new, old

    # masked_weighted_average: float32, PARTIAL_CLIENTS clients each sending the largest half of the tensors
    k = fedkernels.num_selected(len(shapes), PARTIAL_FRACTION)
    order = sorted(range(len(shapes)), key=lambda i: (-math.prod(shapes[i]), i))[:k]
    idx = torch.tensor(order, dtype=torch.int64)
    dst = [torch.empty(s) for s in shapes]
    sent = [(idx, [torch.empty(shapes[i]) for i in order], float(c + 1)) for c in range(PARTIAL_CLIENTS)]
    m = OpModel(
        "masked_weighted_average", f"{model} M={len(shapes)} f32 clients={PARTIAL_CLIENTS} fraction={PARTIAL_FRACTION}"
    )
    m.launches = record(lambda: fedkernels.masked_weighted_average(dst, sent))
    sent_bytes = sum(x.numel() * 4 for _, xs, _ in sent for x in xs)
    written = sum(math.prod(shapes[i]) * 4 for i in order)
    m.kernel_bytes["masked_kernel"] = B(bytes_masked, sent_bytes, written)
    m.floor = m.kernel_bytes["masked_kernel"]
    m.torch = B(torch_masked_average, [(PARTIAL_CLIENTS, math.prod(shapes[i])) for i in order])
    m.note = "senders: the largest half of the tensors (the bench's top-half by delta norm, see the docstring)"
    out.append(m)
    return out
