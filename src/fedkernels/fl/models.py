"""Small models the strategies train, kept as plain state dicts between rounds."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence

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


def embed_mlp(
    in_features: int, out_features: int, embed_dim: int = 256, hidden: Sequence[int] = (256, 256), seed: int = 0
) -> nn.Sequential:
    """The FedAwS/FedALC papers' text model: an embedding layer, then linear layers with ReLU between.

    ``in -> embed_dim`` (no bias, no activation: a bag-of-words embedding, i.e. the feature-weighted
    sum of the words' embedding rows) ``-> hidden[0] -> ReLU -> ... -> hidden[-1] -> ReLU -> out``.
    With the default two hidden widths that is the papers' embedding layer plus three linear layers,
    the first two with ReLU; callers normalise the output (cosine scores). Seeded like :func:`mlp`.

    Args:
        in_features: F (vocabulary size).
        out_features: d, the class-embedding size.
        embed_dim: E, the width of the embedding layer.
        hidden: widths of the linear layers between the embedding and the output.
        seed: initialisation seed.

    Returns:
        ``nn.Sequential``: maps ``[N, F]`` to ``[N, d]``.
    """
    if embed_dim < 1:
        raise ValueError(f"embed_dim must be >= 1, got {embed_dim}")
    g = torch.Generator().manual_seed(seed)
    embed = nn.Linear(in_features, embed_dim, bias=False)
    with torch.no_grad():
        embed.weight.uniform_(-(1.0 / in_features**0.5), 1.0 / in_features**0.5, generator=g)
    body = mlp(embed_dim, out_features, hidden, int(torch.randint(0, 2**62, (1,), generator=g, device="cpu")))
    return nn.Sequential(embed, *body)


def skeleton(build: Callable[[], nn.Module]) -> nn.Module:
    """``build()`` on the meta device: the architecture with no weights allocated or initialised, for
    :func:`torch.func.functional_call` with weights from elsewhere (a download)."""
    with torch.device("meta"):
        return build()


@functools.lru_cache(maxsize=64)
def mlp_skeleton(in_features: int, out_features: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """:func:`mlp`'s architecture on the meta device, built once per shape (a pure function of its
    arguments; callers only read it, through :func:`torch.func.functional_call`)."""
    module = skeleton(lambda: mlp(in_features, out_features, hidden))
    assert isinstance(module, nn.Sequential)
    return module


@functools.lru_cache(maxsize=64)
def embed_mlp_skeleton(in_features: int, out_features: int, embed_dim: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """:func:`embed_mlp`'s architecture on the meta device, built once per shape (as :func:`mlp_skeleton`)."""
    module = skeleton(lambda: embed_mlp(in_features, out_features, embed_dim, hidden))
    assert isinstance(module, nn.Sequential)
    return module


def load_state(module: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """Copy ``state`` into ``module`` (strict: every name and shape must match)."""
    module.load_state_dict(state, strict=True)
    return module


def state_of(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the module's parameters and buffers."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}
