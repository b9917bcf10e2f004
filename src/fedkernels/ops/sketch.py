"""Sketching ops for FedMLH: label hashing, bucket merging, count sketches (docs/design.md §3)."""

from __future__ import annotations

from typing import Any

import torch

from .. import _C  # noqa: F401  (registers the schemas)
from .._validate import as_csr, as_table, as_tensor
from ._error_types import keeps_error_types

# label_hash.out: the one schema defined here rather than in csrc/sketch/sketch_schema.cpp, for its
# Tag::out (torch.compile functionalizes out= ops that carry it; torch < 2.13 has no such tag, and the
# op is then defined without it). Its kernels are registered by the compiled library.
_LABEL_HASH_OUT_LIB = torch.library.Library("fedkernels", "FRAGMENT")
_LABEL_HASH_OUT_LIB.define(
    "label_hash.out(Tensor indptr, Tensor indices, Tensor table, int num_buckets, *, Tensor(a!) out) -> Tensor(a!)",
    tags=(torch.Tag.out,) if hasattr(torch.Tag, "out") else (),
)


@keeps_error_types
def label_hash(
    indptr: torch.Tensor,
    indices: torch.Tensor,
    table: torch.Tensor,
    num_buckets: int,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Hash multi-label targets into R tables of B buckets.

    ``z[j, n, table[l, j]] = 1`` for every label ``l`` of sample ``n`` (a bucket is 1 when any of
    the sample's labels hashes into it).

    Args:
        indptr: int64 ``[N + 1]``, CSR row pointer of the label sets (int32, e.g. scipy's, and numpy
            arrays are converted once).
        indices: int64 ``[nnz]``, class ids in ``[0, p)`` (int32 / numpy converted).
        table: int32 ``[p, R]``, buckets per class (``HashFamily.table(p)``; int64 is range-checked
            and narrowed).
        num_buckets: B.
        out: optional uint8 ``[R, N, B]``, contiguous, on the inputs' device, sharing no memory with
            them. Every element is overwritten (its old contents do not matter) and ``out`` itself is
            returned. A loop that hashes same-shape batches can reuse one buffer and so skip the
            page faults of a fresh output (large outputs come fresh from the OS on every call).
            All arguments, ``out`` included, are checked before anything is written.

    Returns:
        uint8 ``[R, N, B]`` (``out`` when given).

    Example:
        >>> hf = HashFamily(2, 8, seed=0)
        >>> z = label_hash(torch.tensor([0, 2]), torch.tensor([1, 5]), hf.table(10), 8)  # [2, 1, 8]
        >>> buf = torch.empty(2, 1, 8, dtype=torch.uint8)
        >>> z = label_hash(torch.tensor([0, 2]), torch.tensor([1, 5]), hf.table(10), 8, out=buf)  # z is buf
    """
    indptr, indices = as_csr(indptr, indices)
    table = as_table(table)
    if out is None:
        return torch.ops.fedkernels.label_hash(indptr, indices, table, num_buckets)
    return torch.ops.fedkernels.label_hash.out(indptr, indices, table, num_buckets, out=out)


@torch.library.register_fake("fedkernels::label_hash")
def _label_hash_fake(
    indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor, num_buckets: int
) -> torch.Tensor:
    n = indptr.shape[0] - 1
    return table.new_empty((table.shape[1], n, num_buckets), dtype=torch.uint8)


@torch.library.register_fake("fedkernels::label_hash.out")
def _label_hash_out_fake(
    indptr: torch.Tensor, indices: torch.Tensor, table: torch.Tensor, num_buckets: int, *, out: torch.Tensor
) -> torch.Tensor:
    # The shape/dtype/device checks the kernels make, so a compiled graph fails at trace time too.
    want = (table.shape[1], indptr.shape[0] - 1, num_buckets)
    if out.dtype != torch.uint8:
        raise ValueError(f"out must have dtype torch.uint8, got {out.dtype}")
    if out.device != indices.device:
        raise ValueError(f"out and indices must be on the same device, got {out.device} and {indices.device}")
    if tuple(out.shape) != want:
        raise ValueError(f"out must have shape [R, N, B] = {list(want)}, got {list(out.shape)}")
    if not out.is_contiguous():
        raise ValueError(f"out must be contiguous, got strides {out.stride()}")
    return out


@keeps_error_types
def bucket_merge(logp: torch.Tensor, table: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    """Merge per-table bucket scores into class scores.

    ``score[n, l] = reduce_j logp[j, n, table[l, j]]``. ``reduce="median"`` of an even number of
    tables is the mean of the two middle values; a NaN among a class's R values makes its median NaN.
    Values are accumulated in float32 (float64 for float64 input); the output has logp's dtype.
    Differentiable in ``logp`` for ``reduce="mean"`` (deterministic: no atomics).

    Args:
        logp: float32/float16/bfloat16/float64 ``[R, N, B]`` (e.g. log-sigmoid bucket scores).
        table: int32 ``[p, R]`` (``HashFamily.table(p)``), every bucket in ``[0, B)``; int64 (or a
            numpy array) is range-checked and narrowed once.
        reduce: ``"mean"`` or ``"median"`` (median supports R <= 64).

    Returns:
        ``[N, p]``, dtype of ``logp``.

    Example:
        >>> hf = HashFamily(4, 250, seed=0)
        >>> logp = torch.nn.functional.logsigmoid(torch.randn(4, 8, 250))
        >>> scores = bucket_merge(logp, hf.table(3993))  # [8, 3993]
    """
    return torch.ops.fedkernels.bucket_merge(as_tensor("logp", logp), as_table(table), reduce)


@keeps_error_types
def bucket_merge_topk(
    logp: torch.Tensor, table: torch.Tensor, k: int, reduce: str = "mean"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top ``k`` classes of ``bucket_merge(logp, table, reduce)`` per row, without building ``[N, p]``.

    Values are bit-identical to the corresponding ``bucket_merge`` scores; rows are in descending
    order, ties go to the smaller class id, and NaN counts as the largest value (as in
    ``torch.topk``). Extra memory is O(N k) (a heap per row lives in the output). ``k = 0`` gives
    empty outputs; ``k > p`` or ``k < 0`` is an error. Not differentiable.

    Args:
        logp: float ``[R, N, B]``.
        table: int32 ``[p, R]`` (int64 / numpy accepted, as in :func:`bucket_merge`).
        k: number of classes per row, ``0 <= k <= p``.
        reduce: ``"mean"`` or ``"median"``.

    Returns:
        ``(values [N, k]`` with logp's dtype, ``indices`` int64 ``[N, k])``.

    Example:
        >>> hf = HashFamily(4, 4000, seed=0)
        >>> logp = torch.nn.functional.logsigmoid(torch.randn(4, 16, 4000))
        >>> values, classes = bucket_merge_topk(logp, hf.table(131073), k=5)  # [16, 5] each
    """
    return torch.ops.fedkernels.bucket_merge_topk(as_tensor("logp", logp), as_table(table), k, reduce)


@keeps_error_types
def count_sketch(x: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, num_buckets: int) -> torch.Tensor:
    """Count sketch of the last dim: ``M[..., j, table[i, j]] += signs[i, j] * x[..., i]``.

    Linear: sketches of client updates add up on the server. Each bucket sums its classes in
    ascending class order (float32 accumulation for half/bfloat16), so results are deterministic
    on a device whatever the thread count. Differentiable in ``x``.

    Args:
        x: float ``[..., p]``.
        table: int32 ``[p, R]``, buckets in ``[0, num_buckets)`` (int64 / numpy accepted).
        signs: int8 ``[p, R]`` of +1/-1 (``HashFamily.signs(p)``).
        num_buckets: B.

    Returns:
        ``[..., R, B]``, dtype of ``x``.

    Example:
        >>> hf = HashFamily(5, 64, seed=1)
        >>> x = torch.zeros(1000); x[[3, 500]] = torch.tensor([7.0, -2.0])
        >>> m = count_sketch(x, hf.table(1000), hf.signs(1000), 64)  # [5, 64]
    """
    return torch.ops.fedkernels.count_sketch(as_tensor("x", x), as_table(table), as_tensor("signs", signs), num_buckets)


@keeps_error_types
def count_sketch_query(
    sketch: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, reduce: str = "median"
) -> torch.Tensor:
    """Estimate every coordinate from a count sketch: ``x_hat[..., i] = reduce_j signs[i, j] * M[..., j, table[i, j]]``.

    ``reduce`` is ``"median"`` (robust; the even-count median is the mean of the two middle values),
    ``"mean"``, or ``"sum"`` (the exact adjoint of ``count_sketch``). Differentiable in ``sketch`` for
    ``"mean"`` and ``"sum"``.

    Args:
        sketch: float ``[..., R, B]``.
        table: int32 ``[p, R]`` (int64 / numpy accepted, as in :func:`bucket_merge`).
        signs: int8 ``[p, R]``.
        reduce: ``"median"``, ``"mean"`` or ``"sum"``.

    Returns:
        ``[..., p]``, dtype of ``sketch``.

    Example:
        >>> x_hat = count_sketch_query(m, hf.table(1000), hf.signs(1000))  # x_hat[3] == 7, x_hat[500] == -2
    """
    return torch.ops.fedkernels.count_sketch_query(
        as_tensor("sketch", sketch), as_table(table), as_tensor("signs", signs), reduce
    )


# ---- fake (meta) implementations: shapes only, so torch.compile(fullgraph=True) traces the ops


@torch.library.register_fake("fedkernels::bucket_merge")
def _bucket_merge_fake(logp: torch.Tensor, table: torch.Tensor, reduce: str = "mean") -> torch.Tensor:
    return logp.new_empty((logp.shape[1], table.shape[0]))


@torch.library.register_fake("fedkernels::bucket_merge_backward")
def _bucket_merge_backward_fake(grad: torch.Tensor, table: torch.Tensor, num_buckets: int) -> torch.Tensor:
    return grad.new_empty((table.shape[1], grad.shape[0], num_buckets))


@torch.library.register_fake("fedkernels::bucket_merge_topk")
def _bucket_merge_topk_fake(
    logp: torch.Tensor, table: torch.Tensor, k: int, reduce: str = "mean"
) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(0 <= k <= table.shape[0], lambda: f"k must lie in [0, p = {table.shape[0]}], got {k}")
    n = logp.shape[1]
    return logp.new_empty((n, k)), logp.new_empty((n, k), dtype=torch.int64)


@torch.library.register_fake("fedkernels::count_sketch")
def _count_sketch_fake(x: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, num_buckets: int) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], table.shape[1], num_buckets))


@torch.library.register_fake("fedkernels::count_sketch_query")
def _count_sketch_query_fake(
    sketch: torch.Tensor, table: torch.Tensor, signs: torch.Tensor, reduce: str = "median"
) -> torch.Tensor:
    return sketch.new_empty((*sketch.shape[:-2], table.shape[0]))


# ---- autograd: every backward is itself a fedkernels op (deterministic, no atomics)


def _not_differentiable(op: str, reduce: str) -> RuntimeError:
    return RuntimeError(
        f"{op} is differentiable only for reduce='mean'"
        + (" or 'sum'" if op == "count_sketch_query" else "")
        + f", got reduce={reduce!r}"
    )


def _bucket_merge_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    logp, table, reduce = inputs
    ctx.save_for_backward(table)
    ctx.num_buckets, ctx.reduce = logp.shape[2], reduce


def _bucket_merge_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    if ctx.reduce != "mean":
        raise _not_differentiable("bucket_merge", ctx.reduce)
    (table,) = ctx.saved_tensors
    return torch.ops.fedkernels.bucket_merge_backward(grad.contiguous(), table, ctx.num_buckets), None, None


torch.library.register_autograd("fedkernels::bucket_merge", _bucket_merge_backward, setup_context=_bucket_merge_setup)


def _count_sketch_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _, table, signs, _ = inputs
    ctx.save_for_backward(table, signs)


def _count_sketch_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    table, signs = ctx.saved_tensors
    # The adjoint of a count sketch is its "sum" query.
    return torch.ops.fedkernels.count_sketch_query(grad.contiguous(), table, signs, "sum"), None, None, None


torch.library.register_autograd("fedkernels::count_sketch", _count_sketch_backward, setup_context=_count_sketch_setup)


def _count_sketch_query_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    sketch, table, signs, reduce = inputs
    ctx.save_for_backward(table, signs)
    ctx.num_buckets, ctx.reduce = sketch.shape[-1], reduce


def _count_sketch_query_backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    if ctx.reduce not in ("mean", "sum"):
        raise _not_differentiable("count_sketch_query", ctx.reduce)
    table, signs = ctx.saved_tensors
    g = torch.ops.fedkernels.count_sketch(grad.contiguous(), table, signs, ctx.num_buckets)
    if ctx.reduce == "mean":
        g = g / table.shape[1]
    return g, None, None, None


torch.library.register_autograd(
    "fedkernels::count_sketch_query", _count_sketch_query_backward, setup_context=_count_sketch_query_setup
)


def _bucket_merge_backward_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _, table, _ = inputs
    ctx.save_for_backward(table)


def _bucket_merge_backward_backward(ctx: Any, grad_grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    # bucket_merge_backward is linear in grad; its adjoint is the mean merge itself.
    (table,) = ctx.saved_tensors
    return torch.ops.fedkernels.bucket_merge(grad_grad.contiguous(), table, "mean"), None, None


torch.library.register_autograd(
    "fedkernels::bucket_merge_backward", _bucket_merge_backward_backward, setup_context=_bucket_merge_backward_setup
)
