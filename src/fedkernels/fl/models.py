"""Small models the strategies train, kept as plain state dicts between rounds."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence

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


class ResidualBlock(nn.Module):
    """``x + W relu(layernorm(x)) + b``: a pre-norm residual block of width ``w`` (4 tensors)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.linear(torch.relu(self.norm(x)))


def res_mlp(in_features: int, out_features: int, width: int, blocks: int, seed: int = 0) -> nn.Sequential:
    """A deep residual MLP: ``in -> width`` (Linear), ``blocks`` :class:`ResidualBlock` s, ReLU, ``-> out``.

    ``4 + 4 * blocks`` tensors (12 blocks: 52), so partial weight exchange has many tensors to choose
    from, as in the transformers of its paper; the residual form keeps so deep a model trainable.
    Linear weights and biases are drawn like :func:`mlp`'s (seeded), LayerNorms start at (1, 0).
    Indices: ``0`` the input Linear, ``1..blocks`` the blocks, ``blocks + 1`` the ReLU,
    ``blocks + 2`` the output Linear.
    """
    if width < 1 or blocks < 0:
        raise ValueError(f"width must be >= 1 and blocks >= 0, got {width}, {blocks}")
    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.device("cpu"):  # built on the host whatever torch's default device (the loop moves it)
        layers: list[nn.Module] = [nn.Linear(in_features, width)]
        layers += [ResidualBlock(width) for _ in range(blocks)]
        layers += [nn.ReLU(), nn.Linear(width, out_features)]
        model = nn.Sequential(*layers)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                bound = 1.0 / m.in_features**0.5
                m.weight.uniform_(-bound, bound, generator=g)
                m.bias.uniform_(-bound, bound, generator=g)
    return model


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
def res_mlp_skeleton(in_features: int, out_features: int, width: int, blocks: int) -> nn.Sequential:
    """:func:`res_mlp`'s architecture on the meta device, built once per shape (as :func:`mlp_skeleton`)."""
    module = skeleton(lambda: res_mlp(in_features, out_features, width, blocks))
    assert isinstance(module, nn.Sequential)
    return module


@functools.lru_cache(maxsize=64)
def embed_mlp_skeleton(in_features: int, out_features: int, embed_dim: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """:func:`embed_mlp`'s architecture on the meta device, built once per shape (as :func:`mlp_skeleton`)."""
    module = skeleton(lambda: embed_mlp(in_features, out_features, embed_dim, hidden))
    assert isinstance(module, nn.Sequential)
    return module


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
