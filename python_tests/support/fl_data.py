"""Tiny synthetic federated data for loop tests (features reveal the labels, so training helps)."""

from __future__ import annotations

import torch

from fedkernels.fl import ClientData


def tiny_dataset(n: int, num_features: int = 16, num_classes: int = 8, seed: int = 0) -> ClientData:
    """n samples; class c is on when feature c > 0.7, so every label is learnable."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, num_features, generator=g)
    on = x[:, :num_classes] > 0.7
    counts = on.sum(1)
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(counts, 0)
    indices = torch.nonzero(on)[:, 1].to(torch.int64)
    return ClientData(x, indptr, indices, num_classes)


def tiny_clients(num_clients: int = 4, per_client: int = 40, seed: int = 0, **kw) -> list[ClientData]:
    """``num_clients`` independent tiny datasets."""
    return [tiny_dataset(per_client, seed=seed * 1000 + i, **kw) for i in range(num_clients)]


def assert_seed_reproducible(make_server, constant: tuple[str, ...] = ()) -> None:
    """Same seed gives a bit-identical final state; another seed changes it (except ``constant`` keys).
    ``make_server(seed=...)`` builds a fresh Server."""
    a, b, c = make_server(seed=3), make_server(seed=3), make_server(seed=4)
    for s in (a, b, c):
        s.run()
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert any(not torch.equal(a.state[k], c.state[k]) for k in a.state if k not in constant)


def one_label_clients(num_clients: int = 5, per_client: int = 20, seed: int = 0, **kw) -> list[ClientData]:
    """Client i holds only class i (every sample labelled {i}), the FedAwS/FedALC setting."""
    out = []
    for i, d in enumerate(tiny_clients(num_clients, per_client, seed, **kw)):
        n = len(d)
        out.append(
            ClientData(
                d.x,
                torch.arange(n + 1, dtype=torch.int64),
                torch.full((n,), i % d.num_classes, dtype=torch.int64),
                d.num_classes,
            )
        )
    return out


def assert_training_improves(server, margin: float) -> None:
    """Running ``server`` to its last round raises test P@1 (on a fixed held-out set) by more than ``margin``."""
    test = tiny_dataset(400, seed=99)
    before = server.evaluate(test)["P@1"]
    server.run()
    assert server.evaluate(test)["P@1"] > before + margin
