"""Small models the strategies train, kept as plain state dicts between rounds."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn


def mlp(in_features: int, out_features: int, hidden: Sequence[int] = (), seed: int = 0) -> nn.Sequential:
    """A ReLU MLP ``in -> hidden... -> out`` with seeded initialisation."""
    g = torch.Generator().manual_seed(seed)
    dims = [in_features, *hidden, out_features]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        lin = nn.Linear(a, b)
        bound = 1.0 / a**0.5
        with torch.no_grad():
            lin.weight.uniform_(-bound, bound, generator=g)
            lin.bias.uniform_(-bound, bound, generator=g)
        layers.append(lin)
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def load_state(module: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """Copy ``state`` into ``module`` (strict: every name and shape must match)."""
    module.load_state_dict(state, strict=True)
    return module


def state_of(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the module's parameters and buffers."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}
