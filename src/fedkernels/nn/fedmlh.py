"""FedMLHHead: R independent bucket classifiers over one hash family, evaluated as one batch."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .._validate import as_csr
from ..hashing import HashFamily
from ..ops.sketch import bucket_merge, bucket_merge_topk, label_hash


# The default hashing size, shared with the FedMLH strategy (fedkernels.fl.FedMLH reads it here).
def default_hash_size(num_classes: int, num_tables: int | None = None) -> tuple[int, int]:
    """``(R, B)`` for ``p = num_classes``: the FedMLH paper's own pairs at its label counts,
    ``(4, 4000)`` at p = 131073 and ``(8, 5000)`` at p = 312330 (R = 8 from p = 200000 up, B capped
    at 4000 for R = 4 and 5000 for R = 8), and below the cap ``R * B`` about ``p / 2`` (our rule for
    small label spaces, where the paper gives no pairs: Bibtex p = 159 gives (4, 19), Delicious
    p = 983 gives (4, 122)). ``num_tables`` fixes R. ``R * B < p`` for every ``p >= 9``."""
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    r = int(num_tables) if num_tables is not None else (4 if num_classes < 200_000 else 8)
    if r < 1:
        raise ValueError(f"num_tables must be >= 1, got {num_tables}")
    cap = 4000 if r <= 4 else 5000
    return r, max(2, min(num_classes // (2 * r), cap))


class FedMLHHead(nn.Module):
    """The FedMLH output head: R sub-models ``in_features -> hidden... -> B`` bucket logits.

    Sub-model j predicts which of B buckets hold a sample's labels under hash table j. Every
    parameter has R as its first dim and sub-model j owns ``param[j]`` (what per-table averaging
    needs); all R run as one batched computation (``torch.baddbmm``). ``.table`` (int32 ``[p, R]``)
    is a non-persistent buffer rebuilt from ``.hash_family``, so ``state_dict()`` holds only weights.
    ``num_tables`` and ``num_buckets`` default to :func:`default_hash_size` of ``num_classes``, the
    same rule as the FedMLH strategy. ``device`` places the parameters and the table (torch's default
    device when None), as the ``device`` argument of ``torch.nn`` modules does.

    What it returns: ``head(x)`` (``forward``) gives the bucket logits ``[R, N, B]``, not class
    scores; train with :meth:`loss`, take the k best classes with :meth:`predict_topk`
    (``[N, k]`` values and class ids, never ``[N, p]``), or every class's score with :meth:`scores`
    (``[N, p]``, small p only). It replaces ``nn.Linear(F, p)`` through those methods.

    Example:
        >>> head = FedMLHHead(500, num_classes=983, num_tables=4, num_buckets=250, hidden=(128,))
        >>> loss = head.loss(x, indptr, indices)          # x [N, 500], CSR labels
        >>> values, classes = head.predict_topk(x, k=5)   # [N, 5] each
        >>> logits = head(x)                              # bucket logits [4, N, 250], not class scores
    """

    table: torch.Tensor  # buffer (register_buffer in __init__), declared for type checkers

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        num_tables: int | None = None,
        num_buckets: int | None = None,
        hidden: Sequence[int] = (),
        seed: int = 0,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if int(in_features) < 1:
            raise ValueError(f"in_features must be >= 1, got {in_features}")
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if any(int(h) < 1 for h in hidden):
            raise ValueError(f"hidden sizes must be >= 1, got {tuple(hidden)}")
        if num_tables is None or num_buckets is None:
            r, b = default_hash_size(int(num_classes), num_tables)
            num_tables, num_buckets = r, b if num_buckets is None else num_buckets
        self.hash_family = HashFamily(num_tables, num_buckets, seed)  # validates R, B, seed
        self.in_features, self.num_classes = int(in_features), int(num_classes)
        self.num_tables, self.num_buckets = int(num_tables), int(num_buckets)
        table_device = torch.get_default_device() if device is None else device
        self.register_buffer("table", self.hash_family.table(self.num_classes, table_device), persistent=False)
        dims = [self.in_features, *(int(h) for h in hidden), self.num_buckets]
        # weights[i]: [R, d_in, d_out], biases[i]: [R, d_out]
        self.weights = nn.ParameterList(
            nn.Parameter(torch.empty(self.num_tables, a, b, device=device)) for a, b in itertools.pairwise(dims)
        )
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(self.num_tables, b, device=device)) for b in dims[1:])
        # loss()'s uint8 target buffers by (N, device): plain attributes, never in state_dict()
        self._target_buffers: dict[tuple[int, torch.device], torch.Tensor] = {}
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """nn.Linear's default init range per sub-model, U(-1/sqrt(d_in), 1/sqrt(d_in)), drawn from
        ``generator`` (torch's global RNG when None) so a federated run can seed it."""
        for w, b in zip(self.weights, self.biases, strict=True):
            bound = 1.0 / math.sqrt(w.shape[1])
            w.uniform_(-bound, bound, generator=generator)
            b.uniform_(-bound, bound, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Bucket logits of every sub-model: ``x [N, F] -> [R, N, B]``; ``x`` dense or ``torch.sparse_csr``."""
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x must be [N, {self.in_features}], got shape {tuple(x.shape)}")
        last = len(self.weights) - 1
        if x.layout == torch.sparse_csr:
            # Sparse input: one sparse-dense product per table (never densifying x or copying w[0]).
            h = torch.stack([torch.sparse.mm(x, w) for w in self.weights[0]]) + self.biases[0].unsqueeze(1)
            start = 1
            if last > 0:
                h = F.relu(h)
        else:
            h, start = x.unsqueeze(0).expand(self.num_tables, *x.shape), 0
        for i in range(start, last + 1):
            h = torch.baddbmm(self.biases[i].unsqueeze(1), h, self.weights[i])
            if i < last:
                h = F.relu(h)
        return h

    def targets(self, indptr: torch.Tensor, indices: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
        """Bucket targets of CSR label sets: uint8 ``[R, N, B]`` (``label_hash``), written into
        ``out`` (uint8 ``[R, N, B]``, returned) when given."""
        return label_hash(indptr, indices, self.table, self.num_buckets, out=out)

    # Batch sizes whose target buffer is kept: a training loop has the full batch and one short last batch.
    _MAX_TARGET_BUFFERS = 2

    def _target_buffer(self, n: int, device: torch.device) -> torch.Tensor:
        """A reused uint8 ``[R, n, B]`` buffer for loss(): large targets would otherwise come as
        fresh pages from the OS on every step (see label_hash's ``out``)."""
        buffers = self.__dict__.setdefault("_target_buffers", {})  # also for heads pickled before it existed
        key = (n, torch.device(device))
        buf = buffers.pop(key, None)  # re-inserted below: the dict's order is least recently used first
        if buf is None:
            while len(buffers) >= self._MAX_TARGET_BUFFERS:
                buffers.pop(next(iter(buffers)))
            buf = torch.empty(self.num_tables, n, self.num_buckets, dtype=torch.uint8, device=device)
        buffers[key] = buf
        return buf

    def __getstate__(self) -> dict:
        """Pickling and ``copy.deepcopy`` leave the target buffers behind: they are scratch."""
        return {k: v for k, v in nn.Module.__getstate__(self).items() if k != "_target_buffers"}

    def loss(self, x: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        """Mean BCE-with-logits of all R sub-models against their hashed labels (a scalar).

        Args:
            x: ``[N, F]`` features.
            indptr: int64 ``[N + 1]`` CSR row pointers of the labels; another length is a ValueError
                naming ``indptr``.
            indices: int64 ``[nnz]`` class ids in ``[0, p)``.

        int32 CSR from scipy and numpy arrays are accepted for ``indptr`` and ``indices``.
        """
        indptr, indices = as_csr(indptr, indices, num_rows=x.shape[0])  # int32 / numpy converted once
        logits = self(x)
        if torch.compiler.is_compiling():  # keep traced graphs free of module-held mutable state
            z = self.targets(indptr, indices)
        else:  # the uint8 targets live only until the cast below, so one buffer per batch size serves every step
            z = self.targets(indptr, indices, out=self._target_buffer(indptr.numel() - 1, self.table.device))
        z = z.to(logits.dtype)
        return F.binary_cross_entropy_with_logits(logits, z)

    def log_probs(self, x: torch.Tensor) -> torch.Tensor:
        """Log-sigmoid bucket scores ``[R, N, B]``."""
        return F.logsigmoid(self(x))

    @torch.no_grad()
    def predict_topk(self, x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k classes by mean log-sigmoid bucket score: ``(values [N, k], classes int64 [N, k])``."""
        return bucket_merge_topk(self.log_probs(x), self.table, k, "mean")

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Every class's mean log-sigmoid bucket score ``[N, p]`` (for metrics on small p)."""
        return bucket_merge(self.log_probs(x), self.table, "mean")

    def table_state(self, j: int) -> dict[str, torch.Tensor]:
        """Sub-model j's slice of every parameter, by parameter name (views, not copies)."""
        if not 0 <= j < self.num_tables:
            raise IndexError(f"table index j must lie in [0, {self.num_tables}), got {j}")
        return {name: p[j] for name, p in self.named_parameters()}

    def extra_repr(self) -> str:
        hidden = [w.shape[2] for w in self.weights][:-1]
        return (
            f"in_features={self.in_features}, num_classes={self.num_classes}, num_tables={self.num_tables}, "
            f"num_buckets={self.num_buckets}, hidden={tuple(hidden)}, seed={self.hash_family.seed}"
        )
