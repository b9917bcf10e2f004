"""The memory a run's models need, checked against the machine before any data is read, as
:func:`~fedkernels.experiments.limits.check_synthetic` checks the data's size.

Each algorithm's layer widths are checked one by one (``[1, 2**24]``), but not their product: a run with
``FedAvg.hidden = [10**6, 10**6]`` passed every check and died in a 4 TB allocation after loading its
data, and a 108-byte file declaring 2**26 classes gave a model of that many rows. Here each algorithm's
parameter count follows from its size options (hidden widths, ``embed_dim``, ``dim``, R and B, ...) and
the data's d features and p classes, with the activations of one training batch and one evaluation
batch, and a run that cannot fit is refused with a one-line error naming the setting.

The estimate is a **lower bound** of what a round holds at once (so no run that fits is refused): the
server's state, the serialised download, one client's copy of the model and its gradients (and Adam's
two moments), the per-class tables the model keeps beside its weights (FedMLH's ``[p, R]`` hash table),
the run's own per-class arrays, and the larger of one training batch's activations (forward and
backward) and one evaluation batch's (forward only: the class scores go through the fused top-k). The
real peak is higher: the upload and its decode, the aggregate, and the data.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._memory import available_memory
from ..data.datasets import MAX_DENSE_ELEMENTS, dense_width
from ..fl.payload import DEFAULT_MAX_BYTES
from ..fl.strategy import Strategy

if TYPE_CHECKING:
    from ..fl.algorithms import FedAwS
    from .configuration import ExperimentConfig

EXCHANGE_MARGIN = 1 << 20
"""Room left under the payload limit for a payload's header (names, dtypes, shapes, offsets)."""
EVAL_BATCH = 2048
"""The test rows an evaluation ranks at once (``Server.evaluate``'s batch in a run)."""


@dataclass(frozen=True)
class DataShape:
    """The sizes the model's memory depends on, and where they come from (for the error message).

    Attributes:
        train_rows: rows the largest client trains on (a training batch holds at most this many; a
            lower bound when only the data's total is known).
        test_rows: test rows (an evaluation batch holds at most this many).
        num_features: d, the model's input width.
        num_classes: p.
        source: what declared them (``"synthetic"``, ``"declared by <path>"``, ``"the loaded data"``).
    """

    train_rows: int
    test_rows: int
    num_features: int
    num_classes: int
    source: str


@dataclass(frozen=True)
class Footprint:
    """One algorithm's model for a :class:`DataShape`.

    Attributes:
        parameters: trainable elements of the state (float32 unless ``param_bytes`` says otherwise).
        param_bytes: bytes of those parameters.
        table_bytes: bytes of per-class tables kept beside the weights (not trained).
        train_width: floats one training sample's forward pass produces (layer outputs, scores).
        eval_width: floats one evaluated sample's forward pass holds (the scores are fused into the top-k).
        exchanged_bytes: the largest download or upload of one client (the whole model, for most).
    """

    parameters: int
    param_bytes: int
    table_bytes: int
    train_width: int
    eval_width: int
    exchanged_bytes: int


def mlp_parameters(in_features: int, out_features: int, hidden: Sequence[int]) -> int:
    """Weights and biases of :func:`fedkernels.fl.models.mlp` ``in -> hidden... -> out``."""
    return sum(a * b + b for a, b in pairwise([in_features, *hidden, out_features]))


def _extractor(strategy: FedAwS, d: int, out: int) -> tuple[int, int]:
    """(parameters, summed layer widths) of an MLP ``d -> hidden -> out``, or of FedAwS's ``model="embed"``."""
    hidden = [int(h) for h in strategy.hidden]
    if strategy.model == "embed":
        e = int(strategy.embed_dim)
        return d * e + mlp_parameters(e, out, hidden), e + sum(hidden) + out
    return mlp_parameters(d, out, hidden), sum(hidden) + out


def footprint(strategy: Strategy, shape: DataShape) -> Footprint | None:
    """The model ``strategy`` builds for ``shape`` (``None`` for a strategy this module does not know:
    it is then not checked). Every registered strategy is known (python_tests/hardening/test_model_memory.py
    compares each count with the state its ``init_state`` builds)."""
    from ..fl.algorithms import FedAvg, FedAwS, FedMLH, FedSS, FullSoftmax, L1DiffNetwork, LabelPrior

    d, p = shape.num_features, shape.num_classes
    if isinstance(strategy, (FedAvg, FedMLH, FedSS, L1DiffNetwork)):
        hidden = [int(h) for h in strategy.hidden]
    if isinstance(strategy, FedAvg):  # L1Diff and PartialExchange too
        if strategy.model == "resmlp":
            w, blocks = hidden[0], strategy.blocks
            n = d * w + w + blocks * (w * w + 3 * w) + w * p + p
            trunk = w * (1 + 3 * blocks)  # the input layer, then per block: norm, linear, sum
        else:
            n, trunk = mlp_parameters(d, p, hidden), sum(hidden)
        return Footprint(n, 4 * n, 0, trunk + p, trunk, 4 * n)
    if isinstance(strategy, FedMLH):
        r, b = strategy.hash_size(p)
        n = r * mlp_parameters(d, b, hidden)
        return Footprint(n, 4 * n, 4 * p * r, r * (sum(hidden) + b), r * sum(hidden), 4 * n)
    if isinstance(strategy, FedSS):
        e = int(strategy.embed_dim)
        body = mlp_parameters(d, e, hidden)
        n = body + p * e
        rows = p if isinstance(strategy, FullSoftmax) else min(p, int(strategy.num_negatives) + 1)
        copies = 2 if strategy.server_momentum > 0 else 1  # the server's momentum: a second copy, not trained
        widths = sum(hidden) + e
        return Footprint(n, 4 * n * copies, 0, widths + int(strategy.num_negatives), widths, 4 * (body + rows * e))
    if isinstance(strategy, FedAwS):  # FedALC, FedALC-fixed, FedAvg-fixed, FedAvg-positive: one class row each
        body, widths = _extractor(strategy, d, int(strategy.dim))
        n = body + p * int(strategy.dim)
        return Footprint(n, 4 * n, 0, widths + 1, widths, 4 * (body + int(strategy.dim)))
    if isinstance(strategy, L1DiffNetwork):  # the shared layers and the client's own head
        shared = mlp_parameters(d, hidden[-1], hidden[:-1])
        head = hidden[-1] * p + p
        n = shared + strategy.num_clients * head
        return Footprint(n, 4 * n, 0, sum(hidden) + p, sum(hidden), 4 * (shared + head))
    if isinstance(strategy, LabelPrior):
        return Footprint(p, 8 * p, 0, 0, 0, 8 * p)
    return None


RUN_BYTES_PER_CLASS = 16
"""What a run keeps per class beside any model: the training label counts (int64) and the inverse
propensities (float64)."""


def bytes_needed(fp: Footprint, shape: DataShape, batch_size: int, optimizer: str) -> int:
    """The lower bound of the module doc: the state, the serialised download, one client's copy of it
    and its gradients (+ Adam's two moments), the tables, the run's per-class arrays, and the larger of a
    training batch's activations (x2: backward) and an evaluation batch's."""
    moments = 2 if optimizer == "adam" else 0
    grad_bytes = fp.parameters * 4
    batch = max(1, min(batch_size, shape.train_rows))
    evaluated = max(1, min(EVAL_BATCH, shape.test_rows))
    activations = max(2 * 4 * batch * fp.train_width, 4 * evaluated * fp.eval_width)
    return (
        3 * fp.param_bytes
        + (1 + moments) * grad_bytes
        + fp.table_bytes
        + RUN_BYTES_PER_CLASS * shape.num_classes
        + activations
    )


def size_options(strategy: Strategy) -> str:
    """The strategy's options that size its model, as ``Alg.option=value`` (for the error message)."""
    keys = ("hidden", "blocks", "embed_dim", "dim", "num_tables", "num_buckets", "num_negatives", "num_clients")
    opts = strategy.options()
    unused = {"blocks"} if opts.get("model") != "resmlp" else set()
    unused |= {"embed_dim"} if opts.get("model") == "mlp" else set()  # FedAwS's mlp has no embedding layer
    return ", ".join(f"{strategy.name}.{k}={opts[k]}" for k in keys if opts.get(k) is not None and k not in unused)


def check_model_memory(
    strategies: Sequence[Strategy], shape: DataShape, batch_size: int, optimizer: str, budget: int | None = None
) -> None:
    """Refuse a run whose models cannot be exchanged or cannot fit in this machine's memory, before any
    of it is allocated: a client's download or upload above the payload limit (2 GiB,
    :data:`fedkernels.fl.payload.DEFAULT_MAX_BYTES`: every client of every round would be rejected), or
    the lower bound of :func:`bytes_needed` above ``budget`` bytes (default: the available memory).

    Raises:
        ValueError: one line naming the algorithm, its size options, the data's d and p (and where they
            came from), and the bytes against the limit: the payload's, or the parameter count and the
            memory it needs against what the machine has.
    """
    budget = available_memory() if budget is None else budget
    for strategy in strategies:
        fp = footprint(strategy, shape)
        if fp is None:
            continue
        opts = size_options(strategy)
        if fp.exchanged_bytes + EXCHANGE_MARGIN > DEFAULT_MAX_BYTES:
            raise ValueError(
                f"{strategy.name}: a client's download or upload of its model would be {_gib(fp.exchanged_bytes)} "
                f"for d={shape.num_features} features and p={shape.num_classes} classes ({shape.source}"
                f"{'; ' + opts if opts else ''}), more than the {_gib(DEFAULT_MAX_BYTES)} a payload may carry: "
                "every client would be rejected"
            )
        need = bytes_needed(fp, shape, batch_size, optimizer)
        if need > budget:
            raise ValueError(
                f"{strategy.name}: its model has {fp.parameters:,} parameters ({_gib(fp.param_bytes)}) for "
                f"d={shape.num_features} features and p={shape.num_classes} classes ({shape.source}"
                f"{'; ' + opts if opts else ''}; batch_size={batch_size}); training it needs at least "
                f"{_gib(need)}, more than the {_gib(budget)} this machine has available: lower "
                f"{'the widths above' if opts else 'the data size'} or use a smaller dataset"
            )


def _gib(n: int) -> str:
    return f"{n / 2**40:.1f} TiB" if n >= 2**40 else f"{n / 2**30:.2f} GiB"


def check_run_memory(cfg: ExperimentConfig, strategies: Iterable[Strategy], shape: DataShape | None = None) -> None:
    """:func:`check_model_memory` for a run: ``shape`` (default: what the config and the data's headers
    declare, :func:`config_shape`; nothing is checked when they declare nothing), the run's batch
    size and optimizer."""
    shape = config_shape(cfg) if shape is None else shape
    if shape is not None:
        check_model_memory(list(strategies), shape, cfg.batch_size, cfg.optimizer)


def config_shape(cfg: ExperimentConfig) -> DataShape | None:
    """The data's sizes as the config and the data's headers declare them, without reading the data:
    synthetic sizes from ``cfg.synthetic``; a file dataset's from its header lines
    (:func:`fedkernels.data.declared_shape`), d replaced by ``feature_dim`` when set. ``None`` when they
    cannot be known before reading (libsvm and ``.npz`` files carry no header; a dataset not found)."""
    if cfg.dataset == "synthetic":
        from ..data.synthetic import synthetic_multilabel

        params = inspect.signature(synthetic_multilabel).parameters
        args = {k: v.default for k, v in params.items()} | dict(cfg.synthetic)
        total, test, f, p = int(args["num_samples"]), None, int(args["num_features"]), int(args["num_classes"])
        source = "synthetic"
    else:
        from ..data import declared_shape

        path = Path(cfg.dataset)  # located by resolve_run; a name not yet located declares nothing
        try:
            declared = declared_shape(path)
        except (OSError, ValueError):
            return None  # loading the data reports it
        if declared is None:
            return None
        total, test, f, p = declared
        source = f"declared by {path}"
    if test is None:  # one set of samples, split by test_fraction
        test = round(total * cfg.test_fraction)
        total -= test
    if cfg.dataset != "synthetic":  # the width the load gives the features (prepare_data)
        if cfg.feature_dim is not None:
            f = cfg.feature_dim
        elif not cfg.sparse and max(total, test) * f > MAX_DENSE_ELEMENTS:
            f = dense_width(total)  # too wide to keep dense: hashed automatically
    # the largest client holds at least its share; one-label and primary-label clients may hold one row
    share = 1 if cfg.partition in ("one_label", "primary_label") else math.ceil(total / cfg.clients)
    return DataShape(share, test, f, p, source)


def loaded_shape(clients: Sequence[Any], test_rows: int, num_features: int, num_classes: int) -> DataShape:
    """The sizes of a run's loaded and partitioned data (clients: each a ``ClientData``)."""
    return DataShape(max((len(c) for c in clients), default=0), test_rows, num_features, num_classes, "the loaded data")
