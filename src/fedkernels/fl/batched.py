"""A round's clients trained in one batched pass (the in-process fast path of local training).

Every client of a round runs the same local problem (model, loss, optimiser, epochs) on its own data
from its own download. :func:`train_batched` stacks the clients' trainable tensors along a new leading
dimension and takes all their minibatch steps together: per-client gradients come from
``torch.func.vmap(torch.func.grad(...))`` over ``torch.func.functional_call``, and the optimiser
(SGD or Adam, as :func:`fedkernels.fl.local.make_optimizer` builds them) is applied to the stacked
tensors. Each client keeps what the sequential loop (:func:`fedkernels.fl.local.train_local`) gives it:
the same shuffles (its own seeded generator, one ``randperm`` per epoch), the same minibatches, the same
loss reduction, a fresh optimiser state; only the floating-point summation order differs.

Clients are sorted by their step count, longest first, so the clients still training at step t are a
prefix of the stack: a step works on views of that prefix and never copies or pads whole clients
(a short last batch is padded with masked rows).

The pass runs where the problems' tensors are (:func:`pass_device`: the host or a GPU; the in-process
loop moves the round's clients' data to its device first). Seeded draws (shuffles, DP-SGD's Poisson
batches and noise) come from the clients' host generators, as in the sequential loop, so a client draws
the same on every device. With ``TrainConfig.autocast`` the loss and its gradients run under the same
autocast as the sequential forward pass (:func:`fedkernels.fl.local.autocast`), in the dense pass (the
Gram form regroups the input layer's products, which mixed precision would round differently from the
sequential loop, so autocast turns it off). DP-SGD's steps take no autocast, as
:func:`~fedkernels.fl.dpsgd.train_dp_sgd` takes none.

A strategy opts in with :meth:`~fedkernels.fl.strategy.Strategy.local_problem`; clients whose problems do
not share one structure (or a strategy without one) go through the sequential loop.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..sparse_rows import select_rows
from .device import to_device
from .dpsgd import dp_sgd_generators, dp_steps_per_epoch
from .local import autocast
from .payload import Payload
from .types import ClientData, TrainConfig

if TYPE_CHECKING:
    from .strategy import Strategy

Stacked = torch.Tensor | list[torch.Tensor]  # per-client tensors: stacked [K, ...], or a list of K
RowLoss = Callable[
    [nn.Module, dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor
]


@dataclass
class LocalProblem:
    """One client's local training, written as data so that a round's clients can be stacked.

    Attributes:
        module: the architecture, called with :func:`torch.func.functional_call` (its own parameter
            values are never used).
        params: name -> the trainable tensors at the start of local training (the download's values).
        row_loss: ``row_loss(module, params, consts, x [B, F], target [B, ...]) -> [B]``, each row's loss
            (finite for every row, masked or not); the step minimises the mean over the batch's rows whose
            ``row_weight`` is 1 (0 when none is), as the strategy's sequential loss does.
        targets: ``[n, ...]`` per-row targets (e.g. dense labels, or a class id).
        row_weight: float ``[n]``: 1 for rows that count in a batch's mean, 0 for rows the loss skips.
        finish: maps the trained ``params`` (client slices, detached) to the upload.
        generator: the client's shuffle generator, seeded as its sequential ``client_update`` seeds it.
        consts: name -> tensors the loss reads but does not train (e.g. a fixed class embedding).
        key: what must be equal for two clients to be stacked besides the tensors' shapes (e.g. the
            strategy's loss name); ``row_loss`` and ``module``'s type are compared too.
    """

    module: nn.Module
    params: dict[str, torch.Tensor]
    row_loss: RowLoss
    targets: torch.Tensor
    row_weight: torch.Tensor
    finish: Callable[[dict[str, torch.Tensor]], Payload]
    generator: torch.Generator
    consts: dict[str, torch.Tensor] = field(default_factory=dict)
    key: tuple = ()


def structure(p: LocalProblem) -> tuple:
    """What two problems must share to train in one stack."""

    def shapes(d: dict[str, torch.Tensor]) -> tuple:
        return tuple((n, tuple(t.shape), t.dtype) for n, t in d.items())

    return (
        type(p.module),
        p.row_loss,
        p.key,
        shapes(p.params),
        shapes(p.consts),
        tuple(p.targets.shape[1:]),
        p.targets.dtype,
    )


def batch_orders(n: int, config: TrainConfig, generator: torch.Generator) -> list[torch.Tensor]:
    """The minibatches of one client, in step order: what :func:`~fedkernels.fl.local.train_local` draws
    (one ``randperm(n)`` per epoch from ``generator``, cut into ``batch_size`` pieces)."""
    out: list[torch.Tensor] = []
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator, device="cpu")
        out.extend(order[start : start + config.batch_size] for start in range(0, n, config.batch_size))
    return out


def _masked_mean_loss(
    row_loss: RowLoss, module: nn.Module
) -> Callable[[dict, dict, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    def loss(params: dict, consts: dict, x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        per_row = row_loss(module, params, consts, x, target)
        return (per_row * weight).sum() / weight.sum().clamp_min(1.0)

    return loss


class _StackedOptimizer:
    """SGD or Adam over stacked tensors ``[K, ...]``, stepping a prefix ``[:A]`` of the clients; the
    update of each client is torch.optim's (same formulas, per-client state, all clients at the same
    step count)."""

    def __init__(self, params: dict[str, torch.Tensor], config: TrainConfig) -> None:
        if config.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {config.optimizer!r}")
        self.params, self.config, self.t = params, config, 0
        if config.optimizer == "adam":
            self.m = {n: torch.zeros_like(p) for n, p in params.items()}
            self.v = {n: torch.zeros_like(p) for n, p in params.items()}

    @torch.no_grad()
    def step(self, grads: dict[str, torch.Tensor], active: int) -> None:
        cfg = self.config
        self.t += 1
        for n, g in grads.items():
            p = self.params[n][:active]
            if cfg.weight_decay != 0:
                g = g.add(p, alpha=cfg.weight_decay)
            if cfg.optimizer == "sgd":
                p.add_(g, alpha=-cfg.lr)
                continue
            beta1, beta2, eps = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults (make_optimizer keeps them)
            m, v = self.m[n][:active], self.v[n][:active]
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            bias1, bias2 = 1 - beta1**self.t, 1 - beta2**self.t
            denom = (v.sqrt() / bias2**0.5).add_(eps)
            p.addcdiv_(m, denom, value=-cfg.lr / bias1)


def train_batched(problems: Sequence[LocalProblem], data: Sequence[ClientData], config: TrainConfig) -> list[Payload]:
    """Train every client's problem together; returns each client's upload (``problem.finish``), in input order.

    Args:
        problems: one per client, all of one :func:`structure`.
        data: each client's data (``len(data[k])`` rows; features dense or sparse CSR).
        config: the local training settings (shared).

    With ``config.dp_sample_clip`` every client takes DP-SGD's steps (:meth:`_Stack.train_dp_sgd`):
    per-example gradients from ``vmap`` over the rows, each clipped, summed, noised, as
    :func:`~fedkernels.fl.dpsgd.train_dp_sgd` takes them one client at a time.

    The pass trains on the device of the problems' tensors (:func:`pass_device`); with
    ``config.autocast`` its dense steps run under that device's autocast.

    Raises:
        ValueError: the problems do not share one structure, their tensors or the clients' data are not
            all on one device, or a bad ``config``.
    """
    if not problems:
        return []
    if len(problems) != len(data):
        raise ValueError(f"problems and data differ in length: {len(problems)}, {len(data)}")
    if config.epochs < 0 or config.batch_size < 1:
        raise ValueError(f"epochs must be >= 0 and batch_size >= 1, got {config.epochs}, {config.batch_size}")
    first = structure(problems[0])
    if any(structure(p) != first for p in problems[1:]):
        raise ValueError("the clients' local problems differ in structure; train them sequentially")
    pass_device(problems, data)
    if config.dp_sample_clip is not None:
        return _train_dp_sgd(problems, data, config)
    orders = [batch_orders(len(d), config, p.generator) for d, p in zip(data, problems, strict=True)]
    # longest first, so the clients still training at any step are a prefix of the stack
    rank = sorted(range(len(problems)), key=lambda i: (-len(orders[i]), i))
    stack = _Stack([problems[i] for i in rank], [data[i] for i in rank], [orders[i] for i in rank], config)
    layer = gram_input_layer(problems[0], data, config)
    trained: dict[str, Stacked] = stack.train_gram(*layer) if layer is not None else stack.train_dense()
    out: list[Payload] = [{} for _ in problems]
    for j, i in enumerate(rank):
        out[i] = problems[i].finish({n: t[j].contiguous() for n, t in trained.items()})
    return out


def pass_device(problems: Sequence[LocalProblem], data: Sequence[ClientData]) -> torch.device:
    """The one device of every problem's tensors (parameters, constants, targets, row weights) and of
    every client's data: where the batched pass trains.

    Raises:
        ValueError: they are not all on one device (the message names the first tensor that is not).
    """
    first = problems[0]
    device = next(iter(first.params.values())).device if first.params else first.targets.device
    for k, (p, d) in enumerate(zip(problems, data, strict=True)):
        named = [*p.params.items(), *p.consts.items(), ("targets", p.targets), ("row_weight", p.row_weight)]
        named += [("data.x", d.x), ("data.indptr", d.indptr)]
        for name, t in named:
            if t.device != device:
                raise ValueError(f"problems[{k}].{name} is on {t.device}, the pass on {device}: move them together")
    return device


def _train_dp_sgd(problems: Sequence[LocalProblem], data: Sequence[ClientData], config: TrainConfig) -> list[Payload]:
    """DP-SGD for every client of the pass: each client's steps as :func:`~fedkernels.fl.dpsgd.train_dp_sgd`
    takes them (its Poisson batches and noise from its own generators, drawn in the same order), the
    per-example gradients of the active clients from one ``vmap`` over clients and rows."""
    steps = [config.epochs * dp_steps_per_epoch(len(d), config.batch_size) for d in data]
    rank = sorted(range(len(problems)), key=lambda i: (-steps[i], i))
    stack = _Stack([problems[i] for i in rank], [data[i] for i in rank], [[]] * len(rank), config)
    stack.steps = [steps[i] for i in rank]
    trained = stack.train_dp_sgd()
    out: list[Payload] = [{} for _ in problems]
    for j, i in enumerate(rank):
        out[i] = problems[i].finish({n: t[j].contiguous() for n, t in trained.items()})
    return out


# Per-example gradients of one DP-SGD step are held for at most this many values at once (clients are
# taken in chunks below it): [clients, rows, parameters] grows fast.
MAX_PER_EXAMPLE_VALUES = 1 << 26

# The Gram form keeps each client's [n, n] feature Gram matrix: clients with more rows train densely.
MAX_GRAM_ROWS = 4096


def gram_input_layer(
    problem: LocalProblem, data: Sequence[ClientData], config: TrainConfig
) -> tuple[str, str | None] | None:
    """``(weight, bias)`` names of the input layer the Gram-form pass may take over, or ``None``.

    It applies to plain SGD (no weight decay, no autocast) on an ``nn.Sequential`` whose first layer is an
    ``nn.Linear`` that the problem trains, for clients of at most :data:`MAX_GRAM_ROWS` rows.
    """
    m = problem.module
    if config.optimizer != "sgd" or config.weight_decay != 0 or config.autocast != "off":
        return None
    if not isinstance(m, nn.Sequential) or len(m) < 2 or not isinstance(m[0], nn.Linear):
        return None
    weight, bias = "0.weight", "0.bias" if m[0].bias is not None else None
    if weight not in problem.params or (bias is not None and bias not in problem.params):
        return None
    return (weight, bias) if max(len(d) for d in data) <= MAX_GRAM_ROWS else None


class _Stack:
    """The clients of one batched pass, longest first: their problems, data and minibatch orders."""

    def __init__(
        self,
        problems: list[LocalProblem],
        data: list[ClientData],
        orders: list[list[torch.Tensor]],
        config: TrainConfig,
    ) -> None:
        self.problems, self.data, self.config = problems, data, config
        self.device = pass_device(problems, data)
        # the shuffles were drawn on host generators; the indices go to the pass's device once
        self.orders = [[o.to(self.device) for o in order] for order in orders]
        self.steps = [len(o) for o in orders]
        self.module, self.row_loss = problems[0].module, problems[0].row_loss
        self.consts = {n: torch.stack([p.consts[n].detach() for p in problems]) for n in problems[0].consts}

    def _params(self, names: Sequence[str]) -> dict[str, torch.Tensor]:
        return {n: torch.stack([p.params[n].detach() for p in self.problems]).contiguous() for n in names}

    def active(self, t: int) -> int:
        return sum(1 for s in self.steps if s > t)

    def targets(self, t: int, active: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``t``'s targets ``[A, B, ...]`` and row weights ``[A, B]`` (padding rows weigh 0)."""
        bs, ts, ws = self.config.batch_size, [], []
        for j in range(active):
            idx, p = self.orders[j][t], self.problems[j]
            pad = bs - idx.numel()
            target = p.targets[idx]
            ts.append(torch.cat([target, target.new_zeros((pad, *target.shape[1:]))]))
            ws.append(torch.nn.functional.pad(p.row_weight[idx].float(), (0, pad)))
        return torch.stack(ts), torch.stack(ws)

    def train_dense(self) -> dict[str, Stacked]:
        """Every step through ``vmap(grad(loss))`` of the whole module on the stacked minibatches."""
        params = self._params(list(self.problems[0].params))
        opt = _StackedOptimizer(params, self.config)
        step_grad = vmap(grad(_masked_mean_loss(self.row_loss, self.module)))
        bs = self.config.batch_size
        for t in range(self.steps[0] if self.steps else 0):
            active = self.active(t)
            xs = []
            for j in range(active):
                idx = self.orders[j][t]
                x = _dense(select_rows(self.data[j].x, idx))
                xs.append(torch.nn.functional.pad(x, (0, 0, 0, bs - idx.numel())))
            target, weight = self.targets(t, active)
            with autocast(self.config, self.device):  # the sequential loop's forward pass (and here its gradients)
                grads = step_grad(
                    {n: p[:active] for n, p in params.items()},
                    {n: c[:active] for n, c in self.consts.items()},
                    torch.stack(xs),
                    target,
                    weight,
                )
            opt.step({n: g.to(params[n].dtype) for n, g in grads.items()}, active)
        return {n: p for n, p in params.items()}

    def train_dp_sgd(self) -> dict[str, torch.Tensor]:
        """DP-SGD's steps for every client (``self.steps`` each, longest first): at each step each active
        client draws its Poisson batch (rate ``batch / n``), every example's gradient is clipped to
        ``dp_sample_clip``, the clipped gradients are summed, the client's ``N(0, (noise clip)^2)`` is added
        per tensor, and the sum is divided by the expected batch ``q n`` (padding rows weigh 0)."""
        cfg = self.config
        clip, noise = cfg.dp_sample_clip, cfg.dp_sample_noise
        assert clip is not None
        names = list(self.problems[0].params)
        params = self._params(names)
        opt = _StackedOptimizer(params, cfg)
        gens = [dp_sgd_generators(p.generator, cfg.dp_sample_seeded) for p in self.problems]
        row_loss, module = self.row_loss, self.module

        def one(prm: dict, consts: dict, x: torch.Tensor, target: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return row_loss(module, prm, consts, x.unsqueeze(0), target.unsqueeze(0))[0] * w

        per_example = vmap(vmap(grad(one), in_dims=(None, None, 0, 0, 0)))
        size = sum(t[0].numel() for t in params.values())
        for t in range(self.steps[0] if self.steps else 0):
            active = self.active(t)
            chosen = []
            for j in range(active):
                rows = len(self.data[j])
                rate = min(1.0, cfg.batch_size / rows)
                drawn = (
                    (torch.rand(rows, generator=gens[j][0], device="cpu") < rate).nonzero().reshape(-1)
                )  # on the host
                chosen.append(drawn.to(self.device))
            width = max(1, max(c.numel() for c in chosen))
            step = max(1, MAX_PER_EXAMPLE_VALUES // max(1, width * size))
            sums = {n: torch.zeros_like(p[:active]) for n, p in params.items()}
            for lo in range(0, active, step):
                hi = min(active, lo + step)
                xs, ts, ws = [], [], []
                for j in range(lo, hi):
                    idx, p = chosen[j], self.problems[j]
                    pad = width - idx.numel()
                    x = _dense(select_rows(self.data[j].x, idx)) if idx.numel() else None
                    if x is None:
                        x = self.data[j].x.new_zeros((0, self.data[j].x.shape[1])).to_dense()
                    xs.append(torch.nn.functional.pad(x, (0, 0, 0, pad)))
                    target = p.targets[idx]
                    ts.append(torch.cat([target, target.new_zeros((pad, *target.shape[1:]))]))
                    ws.append(torch.nn.functional.pad(p.row_weight[idx].to(xs[-1].dtype), (0, pad)))
                grads = per_example(
                    {n: t[lo:hi] for n, t in params.items()},
                    {n: c[lo:hi] for n, c in self.consts.items()},
                    torch.stack(xs),
                    torch.stack(ts),
                    torch.stack(ws),
                )
                norm = sum(g.double().pow(2).flatten(2).sum(2) for g in grads.values()).sqrt()  # [chunk, width]
                scale = torch.where(norm > 0, (clip / norm).clamp(max=1.0), torch.ones_like(norm))
                real = torch.zeros_like(scale)  # padding rows contribute nothing
                for k, j in enumerate(range(lo, hi)):
                    real[k, : chosen[j].numel()] = 1.0
                scale = (scale * real).to(next(iter(grads.values())).dtype)
                for n, g in grads.items():
                    sums[n][lo:hi] = torch.einsum("cw,cw...->c...", scale, g)
            for j in range(active):
                denom = min(1.0, cfg.batch_size / len(self.data[j])) * len(self.data[j])
                for n in names:  # the sequential loop's order of noise draws
                    z = torch.randn(
                        sums[n][j].shape, generator=gens[j][1], dtype=torch.float64, device="cpu"
                    )  # host draw
                    z = z.to(device=self.device, dtype=sums[n].dtype)
                    sums[n][j] = (sums[n][j] + z * (noise * clip)) / denom
            opt.step(sums, active)
        return dict(params)

    def train_gram(self, weight: str, bias: str | None) -> dict[str, Stacked]:
        """Plain SGD with the input layer in Gram form; the rest of the module under ``vmap(grad(...))``.

        Under SGD the input weights after the steps ``s < t`` are ``W_t = W_0 - lr sum_s g_s^T x_s``
        (``g_s``: the loss gradient at the layer's output, ``x_s``: the minibatch), so the layer's output
        at step t is ``x_t W_0^T - lr (x_t X^T) G + b_t``, where ``G [n, H]`` accumulates every row's
        ``g`` at that row of the client's data ``X [n, F]``. With ``P = X W_0^T`` and the Gram matrix
        ``K = X X^T`` made once, a step costs ``B n H`` instead of ``B F H`` for the forward and again
        for the weight gradient, and ``W`` itself is formed once, at the end: ``W_0 - lr G^T X``. The
        sequential loop's arithmetic, regrouped (equal up to float rounding).
        """
        rest_names = [n for n in self.problems[0].params if n not in (weight, bias)]
        params = self._params(rest_names)
        opt = _StackedOptimizer(params, self.config)
        assert isinstance(self.module, nn.Sequential)  # gram_input_layer checked it
        rest = nn.Sequential(nn.Identity(), *list(self.module)[1:])
        step_grad = vmap(grad(_masked_mean_loss(self.row_loss, rest), argnums=(0, 2)))
        bs, lr = self.config.batch_size, self.config.lr
        feats = [gram_features(d.x) for d in self.data]
        w0 = [p.params[weight].detach() for p in self.problems]
        b0 = [p.params[bias].detach() for p in self.problems] if bias is not None else None
        proj = [f.times(wt) for f, wt in zip(feats, _transposed(w0), strict=True)]  # P = X W_0^T: [n, H]
        gram = [f.gram() for f in feats]  # K = X X^T: [n, n]
        hidden, dtype, device = w0[0].shape[0], w0[0].dtype, self.device
        acc = [torch.zeros(f.rows, hidden, dtype=dtype, device=device) for f in feats]  # G
        bias_acc = [torch.zeros(hidden, dtype=dtype, device=device) for _ in feats]  # the column sums of G
        for t in range(self.steps[0] if self.steps else 0):
            active = self.active(t)
            h = torch.zeros(active, bs, hidden, dtype=dtype, device=device)
            for j in range(active):
                idx = self.orders[j][t]
                rows = h[j, : idx.numel()]
                torch.index_select(proj[j], 0, idx, out=rows)
                if t > 0:
                    rows.addmm_(gram[j][idx], acc[j], alpha=-lr)
                if b0 is not None:
                    rows += b0[j] - lr * bias_acc[j]
            target, row_weight = self.targets(t, active)
            grads, g_h = step_grad(
                {n: p[:active] for n, p in params.items()},
                {n: c[:active] for n, c in self.consts.items()},
                h,
                target,
                row_weight,
            )
            opt.step(grads, active)
            for j in range(active):
                idx = self.orders[j][t]
                g = g_h[j, : idx.numel()]  # padding rows have no gradient
                acc[j].index_add_(0, idx, g)
                bias_acc[j] += g.sum(0)
        trained: dict[str, Stacked] = {n: p for n, p in params.items()}
        trained[weight] = [f.step_weight(w, g, lr) for f, w, g in zip(feats, w0, acc, strict=True)]
        if b0 is not None and bias is not None:
            trained[bias] = [b - lr * g for b, g in zip(b0, bias_acc, strict=True)]
        return {n: trained[n] for n in self.problems[0].params}


def _dense(x: torch.Tensor) -> torch.Tensor:
    return x.to_dense() if x.layout == torch.sparse_csr else x


# id(features) -> (a weak reference to them, their Gram-form view); an entry goes with its tensor
_FEATURES: dict[int, tuple[weakref.ref, _GramFeatures]] = {}
# ... and for clients of more rows than this (a dense product of a few rows beats the CSR one and its transpose)
SPARSE_MIN_ROWS = 150

# Below this share of nonzero features the Gram form's products run on CSR copies of the features.
SPARSE_DENSITY = 0.25


def _transposed(weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each ``w.t()`` made contiguous, once per distinct tensor: a round's clients usually start from
    the same downloaded weight (one shared tensor), which is then copied once instead of per client."""
    made: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], torch.Tensor] = {}
    out = []
    for w in weights:
        key = (w.data_ptr(), int(w.storage_offset()), tuple(w.shape), tuple(w.stride()))
        if key not in made:
            made[key] = w.t().contiguous()
        out.append(made[key])
    return out


def gram_features(x: torch.Tensor) -> _GramFeatures:
    """The Gram-form view of a client's features, made once per feature tensor (a client's data stays
    the same from round to round; the entry goes when the tensor does)."""
    key = id(x)
    hit = _FEATURES.get(key)
    if hit is not None and hit[0]() is x:
        return hit[1]
    feats = _GramFeatures(x)
    _FEATURES[key] = (weakref.ref(x), feats)
    weakref.finalize(x, _FEATURES.pop, key, None)
    return feats


class _GramFeatures:
    """One client's features ``X [n, F]`` for the Gram form: ``X A``, ``X X^T`` and ``W - lr G^T X``,
    through CSR copies when ``X`` is mostly zeros (bag-of-words data), densely otherwise."""

    def __init__(self, x: torch.Tensor) -> None:
        self.rows = int(x.shape[0])
        self.dense = dense = _dense(x)
        self.dense_t = dense.t().contiguous()  # X^T [F, n]
        nonzero = int(torch.count_nonzero(dense))
        self.sparse = nonzero <= SPARSE_DENSITY * max(1, dense.numel())
        with warnings.catch_warnings():  # torch's "sparse CSR support is in beta" note
            warnings.simplefilter("ignore", UserWarning)
            self.x = dense.to_sparse_csr() if self.sparse else dense
            self.x_t = self.dense_t.to_sparse_csr() if self.sparse else self.dense_t
        self._gram: torch.Tensor | None = None

    def times(self, a: torch.Tensor) -> torch.Tensor:
        """``X a`` for a contiguous ``a [F, m]``: ``[n, m]``."""
        return self.x @ a

    def gram(self) -> torch.Tensor:
        """``X X^T``: ``[n, n]`` (made once: the features do not change between rounds)."""
        if self._gram is None:
            self._gram = self.x @ self.dense_t
        return self._gram

    def step_weight(self, w: torch.Tensor, g: torch.Tensor, lr: float) -> torch.Tensor:
        """``w - lr g^T X`` for ``w [H, F]``, ``g [n, H]``: ``[H, F]``."""
        if self.sparse and self.rows > SPARSE_MIN_ROWS:
            step = (self.x_t @ g).t().contiguous()  # [H, F]
            return step.mul_(-lr).add_(w)
        return w.addmm(g.t(), self.dense, alpha=-lr)


def call_module(module: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` under ``params`` (a functional call: ``module``'s own values are never read)."""
    return functional_call(module, params, (x,))


def _owner(cls: type, name: str) -> type:
    return next(k for k in cls.__mro__ if name in k.__dict__)


def has_local_problem(strategy: Strategy) -> bool:
    """Whether ``strategy``'s ``local_problem`` describes its own ``client_update``: it must be defined
    in the class that defines ``client_update`` or below it (a subclass that replaces ``client_update``,
    e.g. L1Diff under FedAvg, does not inherit a batched form that would train the wrong thing)."""
    if "client_update" in vars(strategy):  # replaced on the instance (a test's or a wrapper's): not ours
        return False
    if strategy.stateful_clients:  # the clients' memories live in their endpoints
        return False
    cls = type(strategy)
    owner = _owner(cls, "client_update")
    fn = owner.__dict__["client_update"]
    # a function set on the class after its definition (a monkeypatch) is not the one the class's
    # local_problem was written for: its qualified name is not the class body's
    if getattr(fn, "__qualname__", None) != f"{owner.__qualname__}.client_update":
        return False
    return issubclass(_owner(cls, "local_problem"), owner)


def batched_client_updates(
    strategy: Strategy,
    data: dict[int, ClientData],
    config: TrainConfig,
    downloads: dict[int, Payload],
    round: int,
    seeds: dict[int, int],
    device: torch.device | None = None,
) -> dict[int, Payload] | None:
    """The honest clients' uploads in answer to ``downloads`` (each as its ``client_update`` would give
    it, up to float rounding, DP-SGD's steps and autocast included), trained in one batched pass; ``None``
    when the strategy has no :meth:`~fedkernels.fl.strategy.Strategy.local_problem` for some client or the
    problems cannot be stacked (the caller then runs the sequential loop).

    ``device``: where the clients train (a :class:`~fedkernels.fl.client.LocalClient`'s ``device``): their
    data and downloads go there first, as each client's own call moves them (None: where they are). The
    uploads stay on it.
    """
    if not has_local_problem(strategy):
        return None
    if device is not None:  # the round's clients' data on the device at once: the pass trains them together
        data = {c: data[c].to(device, non_blocking=True) for c in downloads}
        downloads = {c: to_device(down, device, non_blocking=True) for c, down in downloads.items()}
    problems = {}
    for c, down in downloads.items():
        problem = strategy.local_problem(down, data[c], config, round, seeds[c])
        if problem is None:
            return None
        problems[c] = problem
    ids = sorted(problems)
    if len({structure(problems[c]) for c in ids}) != 1:
        return None
    uploads = train_batched([problems[c] for c in ids], [data[c] for c in ids], config)
    return dict(zip(ids, uploads, strict=True))
