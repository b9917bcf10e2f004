"""Sampled-softmax ops for FedSS: negative sampling, fused linear cross-entropy, row means (docs/design.md §3)."""

from __future__ import annotations

from typing import Any, Literal, overload

import torch

from .. import _C  # noqa: F401  (registers the schemas)
from .._validate import as_csr, as_int64, check_int
from ._error_types import keeps_error_types

_MASK64 = (1 << 64) - 1
_REDUCTIONS = ("mean", "sum", "none")


def _splitmix64_at(key: int, i: int) -> int:
    z = (key + (i + 1) * 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def negatives_seed(seed: int, client: int) -> int:
    """The seed client ``client`` of :func:`sample_negatives_batched` draws with (a non-negative int64).

    ``sample_negatives_batched(...)[c]`` equals ``sample_negatives(positives_c, ..., seed=negatives_seed(seed, c))``.
    """
    return _splitmix64_at((seed & _MASK64) ^ 0xD1B54A32D192ED03, client) & 0x7FFFFFFFFFFFFFFF


@keeps_error_types
def sample_negatives(positives: torch.Tensor, num_classes: int, m: int, seed: int) -> torch.Tensor:
    """Draw ``m`` distinct negative classes uniformly from ``[0, num_classes)`` minus ``positives``.

    Exact uniform sampling without replacement (Floyd's algorithm over the complement's index space,
    splitmix64 as a counter-based generator, rejection against modulo bias): expected time
    O(m log |P| + |P| log |P|), independent of ``num_classes``. Same result on CPU and CUDA.

    Args:
        positives: int64 ``[P]``, classes in ``[0, num_classes)`` to exclude (duplicates allowed;
            int32 and numpy arrays are converted).
        num_classes: total number of classes.
        m: number of negatives, at most ``num_classes - |unique(positives)|`` (else ValueError).
        seed: any int64; the draw is a pure function of (positives as a set, num_classes, m, seed).

    Returns:
        int64 ``[m]``, sorted ascending, on the device of ``positives``.

    Example:
        >>> neg = sample_negatives(torch.tensor([3, 7]), num_classes=1000, m=16, seed=0)  # [16]
    """
    num_classes, m, seed = _int_args(num_classes, m, seed)
    return torch.ops.fedkernels.sample_negatives(as_int64("positives", positives), num_classes, m, seed)


@keeps_error_types
def sample_negatives_batched(
    indptr: torch.Tensor, indices: torch.Tensor, num_classes: int, m: int, seed: int
) -> torch.Tensor:
    """:func:`sample_negatives` for many clients at once; client ``c`` uses ``negatives_seed(seed, c)``.

    Args:
        indptr: int64 ``[C + 1]``, CSR row pointer of the clients' positive sets.
        indices: int64 ``[nnz]``, positive classes in ``[0, num_classes)``.
        num_classes: as in :func:`sample_negatives`.
        m: negatives per client (every client draws m).
        seed: the run seed; client ``c`` draws with ``negatives_seed(seed, c)``.

    Returns:
        int64 ``[C, m]``, each row sorted ascending.

    Example:
        >>> neg = sample_negatives_batched(torch.tensor([0, 2, 3]), torch.tensor([1, 5, 9]), 100, 8, seed=1)  # [2, 8]
    """
    num_classes, m, seed = _int_args(num_classes, m, seed)
    indptr, indices = as_csr(indptr, indices)
    return torch.ops.fedkernels.sample_negatives_batched(indptr, indices, num_classes, m, seed)


def _int_args(num_classes: int, m: int, seed: int) -> tuple[int, int, int]:
    """The int arguments of the sampling ops, each checked to fit int64 (``ValueError`` naming it)."""
    return check_int("num_classes", num_classes), check_int("m", m), check_int("seed", seed)


@overload
def linear_cross_entropy(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    chunk_size: int = 0,
    return_lse: Literal[False] = False,
) -> torch.Tensor: ...


@overload
def linear_cross_entropy(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    chunk_size: int = 0,
    *,
    return_lse: Literal[True],
) -> tuple[torch.Tensor, torch.Tensor]: ...


@keeps_error_types
def linear_cross_entropy(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    chunk_size: int = 0,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the logits ``scale * h @ W.T + bias`` without materialising them.

    Per sample ``loss_n = logsumexp_j(z_nj) - z_n,target`` (0 where ``target == ignore_index``),
    computed chunk by chunk of classes with an online log-sum-exp; the backward recomputes the
    logit blocks, so peak extra memory is O(N * chunk + outputs), never O(N * s). On CPU, a reduced
    loss (``"mean"``/``"sum"``, no ``return_lse``) that needs gradients takes a fused path instead:
    the forward also computes the gradients (one logit GEMM instead of two) a tile of rows at a time
    within a 32 MiB logits budget, and the backward only scales them. float32, bfloat16
    and float16 inputs accumulate in float32 (float64 in float64). Differentiable in h, W and bias.
    With ``W = W_full[cols]`` and ``bias = -log(m q)`` on the sampled negatives it is the
    sampled-softmax loss; with all classes it is the full softmax.

    Args:
        h: ``[N, d]`` features.
        W: ``[s, d]`` class rows, same dtype as h.
        target: int64 ``[N]``, in ``[0, s)`` or ``ignore_index`` (else IndexError).
        bias: optional ``[s]`` per-class offset (e.g. the logQ correction; ``-inf`` masks a class).
        scale: logit temperature (multiplies ``h @ W.T``, not the bias).
        ignore_index: target value whose samples contribute 0.
        reduction: ``"mean"`` (over non-ignored samples, 0 if none), ``"sum"`` or ``"none"``.
        chunk_size: classes per block (0: the default, 512).
        return_lse: also return the per-sample log-sum-exp ``[N]`` (differentiable too).

    Returns:
        loss (torch.Tensor): float32 (float64 for float64 inputs), ``[]``, or ``[N]`` for ``"none"``.
        lse (torch.Tensor): ``[N]``, only with ``return_lse`` (the pair ``(loss, lse)`` is returned).

    Example:
        >>> h, W, y = torch.randn(8, 16, requires_grad=True), torch.randn(100, 16), torch.randint(0, 100, (8,))
        >>> linear_cross_entropy(h, W, y).backward()
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if _takes_fused_path(h, W, bias, reduction, return_lse):
        fused: torch.Tensor = _FusedLinearCrossEntropy.apply(  # type: ignore[no-untyped-call]
            h, W, target, bias, float(scale), int(ignore_index), reduction, int(chunk_size)
        )
        return fused
    loss, lse = torch.ops.fedkernels.linear_cross_entropy(
        h, W, target, bias, float(scale), int(ignore_index), reduction, int(chunk_size)
    )
    return (loss, lse) if return_lse else loss


def _takes_fused_path(
    h: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None, reduction: str, return_lse: bool
) -> bool:
    """CPU, a reduced loss without lse, and some input that needs a gradient: forward and gradients in one op."""
    if return_lse or reduction == "none" or not torch.is_grad_enabled():
        return False
    tensors = [t for t in (h, W, bias) if isinstance(t, torch.Tensor)]
    if len(tensors) != 3 - (bias is None) or any(t.device.type != "cpu" for t in tensors):
        return False  # not tensors (the op's checks name the argument) or not on CPU
    return any(t.requires_grad for t in tensors)


class _FusedLinearCrossEntropy(torch.autograd.Function):
    """Reduced linear cross-entropy whose forward also computes the gradients for an upstream gradient of 1.

    The backward scales them by the real upstream gradient (a scalar) and casts them to the input dtypes.
    """

    @staticmethod
    def forward(
        ctx: Any,
        h: torch.Tensor,
        W: torch.Tensor,
        target: torch.Tensor,
        bias: torch.Tensor | None,
        scale: float,
        ignore_index: int,
        reduction: str,
        chunk_size: int,
    ) -> torch.Tensor:
        loss, _, grad_h, grad_W, grad_bias = torch.ops.fedkernels.linear_cross_entropy_fused(
            h, W, target, bias, scale, ignore_index, reduction, chunk_size
        )
        ctx.save_for_backward(grad_h, grad_W, grad_bias)
        ctx.dtypes = (h.dtype, W.dtype, None if bias is None else bias.dtype)
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        h_dtype, W_dtype, b_dtype = ctx.dtypes
        g = grad_loss.to(ctx.saved_tensors[0].dtype)

        def scaled(grad: torch.Tensor, dtype: torch.dtype, needed: bool) -> torch.Tensor | None:
            return (grad * g).to(dtype) if needed else None

        grad_h, grad_W, grad_bias = ctx.saved_tensors
        need = ctx.needs_input_grad
        return (
            scaled(grad_h, h_dtype, need[0]),
            scaled(grad_W, W_dtype, need[1]),
            None,
            scaled(grad_bias, b_dtype, need[3]) if b_dtype is not None else None,
            None,
            None,
            None,
            None,
        )


@keeps_error_types
def scatter_rows_mean(out: torch.Tensor, idx: torch.Tensor, src: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """In place: every row ``r`` named in ``idx`` becomes the weighted mean of its sources.

    ``out[r] = sum_{t: idx_t = r} weight_t src_t / sum_{t: idx_t = r} weight_t``; rows not in ``idx``
    keep their value. Deterministic: sources are sorted stably by row and each row is summed in
    their original order (no atomics), so the bits never depend on threads or runs. This is the
    server's aggregation of sparse row updates from many clients.

    Weights of any finite size work: a row whose largest weight is above 1 has its weights scaled
    by a power of two (to below 1) before summing, which leaves the mean unchanged and the bits the
    same wherever the unscaled sums would not overflow, and keeps ``weight_t * src_t`` and the weight
    sum finite where they would overflow (finite weights summing past the dtype's max gave NaN).

    Args:
        out: ``[n, d]`` contiguous float tensor, updated in place.
        idx: int64 ``[T]`` rows in ``[0, n)`` (IndexError otherwise); repeats are what get averaged.
        src: ``[T, d]``, dtype of ``out``.
        weight: ``[T]`` float, finite and ``>= 0``; a named row whose weights sum to 0 is a ValueError
            (raised before ``out`` is touched). float64 weights for a float32/float16/bfloat16 ``out``
            (summed in float32) must be at most float32's max (ValueError otherwise).

    ``idx``, ``src`` and ``weight`` must not share memory with ``out`` (ValueError, before ``out`` is
    touched): rows of ``out`` are written while the inputs are read, so ``src = out[:T]`` would give
    wrong rows. Pass a copy (``out[:T].clone()``).

    Returns:
        ``out``.

    Example:
        >>> W = torch.zeros(5, 2)
        >>> scatter_rows_mean(W, torch.tensor([1, 1, 3]), torch.ones(3, 2), torch.tensor([1.0, 3.0, 2.0]))
    """
    torch.ops.fedkernels.scatter_rows_mean(out, idx, src, weight)
    return out


# ---- fake (meta) implementations, so torch.compile(fullgraph=True) traces the ops


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


@torch.library.register_fake("fedkernels::sample_negatives")
def _sample_negatives_fake(positives: torch.Tensor, num_classes: int, m: int, seed: int) -> torch.Tensor:
    return positives.new_empty((m,), dtype=torch.int64)


@torch.library.register_fake("fedkernels::sample_negatives_batched")
def _sample_negatives_batched_fake(
    indptr: torch.Tensor, indices: torch.Tensor, num_classes: int, m: int, seed: int
) -> torch.Tensor:
    return indices.new_empty((indptr.shape[0] - 1, m), dtype=torch.int64)


@torch.library.register_fake("fedkernels::linear_cross_entropy")
def _lce_fake(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    scale: float = 1.0,
    ignore_index: int = -100,
    reduction: str = "mean",
    chunk_size: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    acc = _acc_dtype(h.dtype)
    loss_shape = (h.shape[0],) if reduction == "none" else ()
    return h.new_empty(loss_shape, dtype=acc), h.new_empty((h.shape[0],), dtype=acc)


@torch.library.register_fake("fedkernels::linear_cross_entropy_backward")
def _lce_backward_fake(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    lse: torch.Tensor,
    grad_loss: torch.Tensor,
    grad_lse: torch.Tensor,
    scale: float,
    ignore_index: int,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grad_bias = torch.empty_like(bias) if bias is not None else h.new_empty((0,), dtype=_acc_dtype(h.dtype))
    return torch.empty_like(h), torch.empty_like(W), grad_bias


@torch.library.register_fake("fedkernels::linear_cross_entropy_fused")
def _lce_fused_fake(
    h: torch.Tensor,
    W: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
    ignore_index: int,
    reduction: str,
    chunk_size: int,
) -> tuple[torch.Tensor, ...]:
    acc = _acc_dtype(h.dtype)
    grad_bias = h.new_empty((W.shape[0] if bias is not None else 0,), dtype=acc)
    return (
        h.new_empty((), dtype=acc),
        h.new_empty((h.shape[0],), dtype=acc),
        h.new_empty(h.shape, dtype=acc),
        W.new_empty(W.shape, dtype=acc),
        grad_bias,
    )


@torch.library.register_fake("fedkernels::scatter_rows_mean")
def _scatter_rows_mean_fake(out: torch.Tensor, idx: torch.Tensor, src: torch.Tensor, weight: torch.Tensor) -> None:
    return None


# ---- autograd of linear_cross_entropy (through both the loss and the lse)


def _lce_setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    h, W, target, bias, scale, ignore_index, reduction, chunk_size = inputs
    ctx.save_for_backward(h, W, target, bias, output[1])
    ctx.has_bias = bias is not None
    ctx.args = (scale, ignore_index, reduction, chunk_size)


def _lce_backward(
    ctx: Any, grad_loss: torch.Tensor | None, grad_lse: torch.Tensor | None
) -> tuple[torch.Tensor | None, ...]:
    h, W, target, bias, lse = ctx.saved_tensors
    scale, ignore_index, reduction, chunk_size = ctx.args
    live = (target != ignore_index).to(lse.dtype)
    if grad_loss is None:
        per_sample = torch.zeros_like(lse)
    elif reduction == "none" or reduction == "sum":
        per_sample = grad_loss.to(lse.dtype) * live
    else:
        per_sample = grad_loss.to(lse.dtype) * live / live.sum().clamp_min(1)
    g_lse = torch.zeros_like(lse) if grad_lse is None else grad_lse.to(lse.dtype).contiguous()
    grad_h, grad_W, grad_bias = torch.ops.fedkernels.linear_cross_entropy_backward(
        h,
        W,
        target,
        bias if ctx.has_bias else None,
        lse,
        per_sample.contiguous(),
        g_lse,
        scale,
        ignore_index,
        chunk_size,
    )
    return grad_h, grad_W, None, (grad_bias if ctx.has_bias else None), None, None, None, None


torch.library.register_autograd("fedkernels::linear_cross_entropy", _lce_backward, setup_context=_lce_setup_context)
