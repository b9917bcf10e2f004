"""Local training on a client: E epochs of shuffled minibatches, seeded."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from .types import ClientData, TrainConfig

AUTOCAST = ("off", "bf16")  # TrainConfig.autocast values


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    """SGD or Adam over ``params`` as ``config`` says."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, weight_decay=config.weight_decay)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {config.optimizer!r}")


def train_local(
    params: list[torch.Tensor],
    loss_fn: Callable[[ClientData], torch.Tensor],
    data: ClientData,
    config: TrainConfig,
    generator: torch.Generator,
) -> int:
    """Minimise ``loss_fn(batch)`` over ``data`` for ``config.epochs`` epochs; returns the step count.

    Args:
        params: the tensors to train (``requires_grad`` set).
        loss_fn: maps a minibatch (a :class:`ClientData`) to a scalar loss.
        generator: seeds the shuffling, so a client's run is reproducible.
    """
    if config.epochs < 0 or config.batch_size < 1:
        raise ValueError(f"epochs must be >= 0 and batch_size >= 1, got {config.epochs}, {config.batch_size}")
    opt = make_optimizer(params, config)
    if config.dp_sample_clip is not None:  # sample-level DP: per-example clipping and noise
        from .dpsgd import train_dp_sgd

        return train_dp_sgd(params, loss_fn, data, config, generator, opt)
    n, steps = len(data), 0
    for _ in range(config.epochs):
        # the shuffle is drawn on the host generator whatever the device: same order on cpu and cuda
        order = torch.randperm(n, generator=generator, device="cpu")
        for start in range(0, n, config.batch_size):
            batch = data.rows(order[start : start + config.batch_size])
            opt.zero_grad(set_to_none=True)
            with autocast(config, data.device):
                loss = loss_fn(batch)
            loss.backward()
            opt.step()
            steps += 1
    return steps


def autocast(config: TrainConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """The forward pass's mixed-precision context: bfloat16 autocast with ``config.autocast == "bf16"``
    (matrix products in bf16; losses, reductions and the fedkernels ops in float32, see
    :mod:`fedkernels.ops.autocast`), else nothing. Parameters, optimizer state, uploads and the
    server's aggregation stay float32 either way."""
    if config.autocast == "off":
        return contextlib.nullcontext()
    if config.autocast != "bf16":
        raise ValueError(f"autocast must be one of {AUTOCAST}, got {config.autocast!r}")
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
