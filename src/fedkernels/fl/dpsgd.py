"""Sample-level DP-SGD for local training (Abadi et al. 2016): per-sample clipping and Gaussian noise.

Each step samples every local example independently with probability ``q = batch_size / n`` (Poisson,
the accountant's model), takes each sampled example's gradient (a microbatch of one, so every
strategy's loss works, custom ops included), clips it to L2 norm ``clip``, sums, adds
``N(0, (noise * clip)^2)`` and divides by the expected batch ``q n``. The optimizer then steps as usual.
A client's epsilon after ``s`` such steps is that of ``s`` Poisson-subsampled Gaussian mechanisms
(:func:`fedkernels.fl.privacy.dp.epsilon` with rate q): what ``fedkernels run`` reports as
``sample_epsilon`` (the largest over clients).

Cost: one backward pass per sampled example (no vectorisation across the batch).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import torch

from ..seeding import derive_seed
from .types import ClientData, TrainConfig


def dp_steps_per_epoch(n: int, batch_size: int) -> int:
    """Steps per local epoch: ``ceil(n / batch)``."""
    return max(1, math.ceil(n / batch_size)) if n > 0 else 0


def dp_sgd_generators(generator: torch.Generator, seeded: bool) -> tuple[torch.Generator, torch.Generator]:
    """DP-SGD's batch and noise generators: from the device's OS randomness, or (``seeded``, a
    reproducible simulation) ``generator`` itself and one derived from its seed."""
    if seeded:
        return generator, torch.Generator().manual_seed(derive_seed(generator.initial_seed(), "dp-sgd-noise"))
    fresh = [torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little")) for _ in range(2)]
    return fresh[0], fresh[1]


def train_dp_sgd(
    params: list[torch.Tensor],
    loss_fn: Callable[[ClientData], torch.Tensor],
    data: ClientData,
    config: TrainConfig,
    generator: torch.Generator,
    optimizer: torch.optim.Optimizer,
) -> int:
    """``config.epochs * ceil(n / batch)`` DP-SGD steps over ``data``; returns the step count.

    The Poisson batches and the noise come from the device's OS randomness: a batch the server could
    recompute (from the seed it gives the client) would void the amplification by sampling against it,
    and a noise seed anyone else knows lets them subtract the noise. With ``config.dp_sample_seeded``
    (a reproducible simulation, not private) both come from ``generator`` instead.
    """
    clip, noise = config.dp_sample_clip, config.dp_sample_noise
    assert clip is not None
    n = len(data)
    q = min(1.0, config.batch_size / n) if n else 0.0
    generator, noise_gen = dp_sgd_generators(generator, config.dp_sample_seeded)
    steps = 0
    for _ in range(config.epochs * dp_steps_per_epoch(n, config.batch_size)):
        chosen = (torch.rand(n, generator=generator, device="cpu") < q).nonzero().reshape(-1)
        total = [torch.zeros_like(p) for p in params]
        for i in chosen.tolist():
            loss = loss_fn(data.rows(torch.tensor([i], device="cpu")))
            raw = torch.autograd.grad(loss, params, allow_unused=True)
            grads = [torch.zeros_like(p) if g is None else g for g, p in zip(raw, params, strict=True)]
            norm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads))
            scale = min(1.0, clip / norm) if norm > 0 else 1.0
            for acc, g in zip(total, grads, strict=True):
                acc.add_(g, alpha=scale)
        optimizer.zero_grad(set_to_none=True)
        for p, acc in zip(params, total, strict=True):
            # drawn on the host generator (the same noise on every device), then moved to the parameter
            z = torch.randn(p.shape, generator=noise_gen, dtype=torch.float64, device="cpu").to(p.device, p.dtype) * (
                noise * clip
            )
            p.grad = (acc + z) / (q * n)
        optimizer.step()
        steps += 1
    return steps
