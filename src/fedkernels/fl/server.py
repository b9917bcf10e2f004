"""The embedded federated loop: all clients in one process, every payload really serialised."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..metrics import ranking_metrics
from . import payload as pl
from .seeding import derive_seed, numpy_rng
from .strategy import State, Strategy
from .types import ClientData, ClientResult, RoundRecord, TrainConfig


@dataclass
class RunConfig:
    """How a federated run goes: rounds, clients per round, local training, seed, evaluation."""

    rounds: int = 10
    clients_per_round: int = 4
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    eval_every: int = 1
    eval_k: tuple[int, ...] = (1, 3, 5)


class Server:
    """Holds the global state and runs rounds of a :class:`Strategy` over in-process clients.

    Args:
        strategy: the algorithm.
        clients: each client's local data.
        num_features, num_classes: the model's input width and label count.
        config: the run's settings.
    """

    def __init__(self, strategy: Strategy, clients: list[ClientData], num_features: int, num_classes: int,
                 config: RunConfig) -> None:
        if not clients:
            raise ValueError("clients must not be empty")
        if not 1 <= config.clients_per_round <= len(clients):
            raise ValueError(f"clients_per_round must be in [1, {len(clients)}], got {config.clients_per_round}")
        self.strategy = strategy
        self.clients = clients
        self.config = config
        self.state: State = strategy.init_state(num_features, num_classes, derive_seed(config.seed, "init"))
        strategy.setup(clients, derive_seed(config.seed, "setup"))
        self.history: list[RoundRecord] = []
        self.round = 0

    def select_clients(self, round: int) -> list[int]:
        """The clients of ``round``: a seeded sample without replacement, in ascending id order."""
        rng = numpy_rng(self.config.seed, "select", round)
        chosen = rng.choice(len(self.clients), size=self.config.clients_per_round, replace=False)
        return sorted(int(c) for c in chosen)

    def run_client(self, client_id: int, round: int) -> tuple[ClientResult, int]:
        """One client's round trip through real serialisation. Returns its checked result and the
        bytes sent down. Raises :class:`fedkernels.fl.payload.PayloadError` for a bad upload."""
        s, data, seed = self.strategy, self.clients[client_id], derive_seed(self.config.seed, "client", round, client_id)
        bytes_up = 0
        request = s.client_request(data, round, seed)
        if request is not None:
            raw = pl.encode(request)
            bytes_up += len(raw)
            request = pl.decode(raw, s.request_spec(self.state))
        down = s.client_payload(self.state, client_id, request, round, seed)
        raw_down = pl.encode(down)
        received = pl.decode(raw_down)
        up = s.client_update(received, data, self.config.train, round, seed)
        raw_up = pl.encode(up)
        bytes_up += len(raw_up)
        checked = pl.decode(raw_up, s.upload_spec(self.state, down))
        return ClientResult(client_id, checked, len(data), bytes_up), len(raw_down)

    def run_round(self) -> RoundRecord:
        """Select, train, check and aggregate one round; a client whose upload is rejected or whose
        training raises is recorded as failed and left out, and the state changes only at the end."""
        t0 = time.perf_counter()
        r = self.round
        chosen = self.select_clients(r)
        results: list[ClientResult] = []
        failed: list[tuple[int, str]] = []
        down_total = 0
        for c in chosen:
            try:
                res, down = self.run_client(c, r)
            except pl.PayloadError as e:
                failed.append((c, f"rejected: {e}"))
                continue
            down_total += down
            results.append(res)
        if results:
            self.state = self.strategy.aggregate(self.state, results, r)
        rec = RoundRecord(r, chosen, failed, down_total, sum(x.bytes_up for x in results))
        rec.seconds = time.perf_counter() - t0
        self.history.append(rec)
        self.round += 1
        return rec

    def evaluate(self, test: ClientData, ks: tuple[int, ...] | None = None, batch: int = 4096) -> dict[str, float]:
        """Ranking metrics of the global model on ``test``."""
        ks = ks or self.config.eval_k
        kmax = min(max(ks), test.num_classes)
        preds = [self.strategy.predict_topk(self.state, test.x[i:i + batch], kmax) for i in range(0, len(test), batch)]
        topk = torch.cat(preds) if preds else torch.empty(0, kmax, dtype=torch.int64)
        return ranking_metrics(topk, test.indptr, test.indices, tuple(k for k in ks if k <= kmax))

    def run(self, test: ClientData | None = None,
            on_round: Callable[[RoundRecord], None] | None = None) -> list[RoundRecord]:
        """Run the remaining rounds of the config; evaluate on ``test`` every ``eval_every`` rounds."""
        while self.round < self.config.rounds:
            rec = self.run_round()
            if test is not None and (rec.round + 1) % self.config.eval_every == 0:
                rec.metrics = self.evaluate(test)
            if on_round is not None:
                on_round(rec)
        return self.history
