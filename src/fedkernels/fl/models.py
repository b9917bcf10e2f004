"""Small models the strategies train, kept as plain state dicts between rounds."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from ..nn.topk import sequential_topk
from ..ops.topk import linear_topk


def mlp(in_features: int, out_features: int, hidden: Sequence[int] = (), seed: int = 0) -> nn.Sequential:
    """A ReLU MLP ``in -> hidden... -> out`` with seeded initialisation, built on the host (the same
    weights wherever it then moves)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    dims = [in_features, *hidden, out_features]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(dims)):
        lin = nn.Linear(a, b, device="cpu")
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
    g = torch.Generator(device="cpu").manual_seed(seed)
    embed = nn.Linear(in_features, embed_dim, bias=False, device="cpu")
    with torch.no_grad():
        embed.weight.uniform_(-(1.0 / in_features**0.5), 1.0 / in_features**0.5, generator=g)
    body = mlp(embed_dim, out_features, hidden, int(torch.randint(0, 2**62, (1,), generator=g, device="cpu")))
    return nn.Sequential(embed, *body)


def load_state(module: nn.Module, state: dict[str, torch.Tensor]) -> nn.Module:
    """Copy ``state`` into ``module`` (strict: every name and shape must match), on the state's device:
    the module moves to where the state's tensors are (modules are built on the host, seeded)."""
    for t in state.values():
        module.to(t.device)
        break
    module.load_state_dict(state, strict=True)
    return module


def state_of(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the module's parameters and buffers."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def topk_ids(
    h: torch.Tensor, W: torch.Tensor, k: int, bias: torch.Tensor | None = None, scale: float = 1.0
) -> torch.Tensor:
    """int64 ``[N, k]``: the classes of the k largest ``scale * h @ W.T + bias`` per row, by the fused
    :func:`fedkernels.linear_topk` (never the ``[N, p]`` scores; ties to the smaller class id).

    Args:
        h: ``[N, d]`` representations (cast to W's dtype).
        W: ``[p, d]`` class rows.
        k: classes per row.
        bias: optional ``[p]``.
        scale: multiplies ``h @ W.T``.
    """
    return linear_topk(h.to(W.dtype), W, bias, k=k, scale=scale)[1]


def model_topk_ids(model: nn.Module, x: torch.Tensor, k: int) -> torch.Tensor:
    """int64 ``[N, k]``: the top-k classes of ``model(x)`` (its last layer an ``nn.Linear``), fused
    (:func:`fedkernels.nn.sequential_topk`): every predict_topk of an MLP classifier goes through here."""
    return sequential_topk(model, x, k)[1]
