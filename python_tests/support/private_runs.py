"""What the private-round tests share: the 5 tiny clients, a short run config, a private server, and
a client wrapper that records every message and reply."""

from __future__ import annotations

from fedkernels.fl import ClientData, RunConfig, TrainConfig
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, make_strategy

NUM_CLIENTS = 5


def clients_for(name: str) -> list[ClientData]:
    return [client_data(i, NUM_CLIENTS, name) for i in range(NUM_CLIENTS)]


def config(rounds: int = 2, per_round: int = 4, seed: int = 7) -> RunConfig:
    return RunConfig(
        rounds=rounds, clients_per_round=per_round, seed=seed, train=TrainConfig(epochs=1, batch_size=16, lr=0.3)
    )


class Spy:
    """A client endpoint that appends ``(kind, message, reply)`` (bytes) to ``log``; with ``seed``,
    the client trains with that seed whatever the server sends (so which client holds which data is
    all that differs between two runs)."""

    def __init__(self, inner, log: list, seed: int | None = None) -> None:
        self.inner, self.log, self.seed = inner, log, seed

    def handle(self, kind: str, round: int, seed: int, message: bytes) -> bytes:
        reply = self.inner.handle(kind, round, seed if self.seed is None else self.seed, message)
        self.log.append((kind, message, reply))
        return reply


def private_server(name: str, privacy, cfg: RunConfig | None = None, data=None, wrapper=None):
    """A :class:`~fedkernels.fl.privacy.PrivateServer` of ``name`` over the tiny clients (or ``data``)."""
    from fedkernels.fl.privacy import PrivateServer

    data = clients_for(name) if data is None else data
    cfg = config(1) if cfg is None else cfg
    return PrivateServer(make_strategy(name), data, NUM_FEATURES, NUM_CLASSES, cfg, privacy, wrapper)
