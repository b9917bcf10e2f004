"""The embedded federated loop: all clients in one process, every payload really serialised.

Fault tolerant: a client that crashes, misses its deadline, sends nothing or sends a payload that
fails its spec is recorded in ``RoundRecord.failed`` and left out; the state changes only when a
round's checked uploads are aggregated. With ``RunConfig.checkpoint`` the run is checkpointed
atomically after every round and resumes from there, bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..metrics import ranking_metrics
from . import payload as pl
from .checkpoint import clean_stale_temps, load_checkpoint, save_checkpoint
from .client import ClientEndpoint, ClientTimeout, LocalClient, call_with_deadline
from .seeding import derive_seed, numpy_rng
from .strategy import State, Strategy
from .types import ClientData, ClientResult, RoundRecord, TrainConfig

ClientWrapper = Callable[[int, ClientEndpoint], ClientEndpoint]


@dataclass
class RunConfig:
    """How a federated run goes: rounds, clients per round, local training, seed, evaluation."""

    rounds: int = 10
    clients_per_round: int = 4
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    eval_every: int = 1
    eval_k: tuple[int, ...] = (1, 3, 5)
    client_timeout: float | None = None  # seconds per client call; None waits forever
    checkpoint: str | None = None  # file written after every round of run(), resumed from if present
    max_upload_bytes: int | None = None  # tighter bound than the strategy's spec on any client's bytes


class Server:
    """Holds the global state and runs rounds of a :class:`Strategy` over in-process clients.

    Args:
        strategy: the algorithm.
        clients: each client's local data.
        num_features: the model's input width.
        num_classes: the number of labels.
        config: the run's settings. If ``config.checkpoint`` names an existing file, the run
            resumes from it (its seed, strategy and client counts must match).
        client_wrapper: ``(client_id, endpoint) -> endpoint``, e.g. a
            :class:`fedkernels.fl.faults.FaultInjector` or a test's malicious client.
    """

    def __init__(
        self,
        strategy: Strategy,
        clients: list[ClientData],
        num_features: int,
        num_classes: int,
        config: RunConfig,
        client_wrapper: ClientWrapper | None = None,
    ) -> None:
        if not clients:
            raise ValueError("clients must not be empty")
        if not 1 <= config.clients_per_round <= len(clients):
            raise ValueError(f"clients_per_round must be in [1, {len(clients)}], got {config.clients_per_round}")
        if config.max_upload_bytes is not None and config.max_upload_bytes < 8:
            raise ValueError(f"max_upload_bytes must be >= 8 or None, got {config.max_upload_bytes}")
        if config.client_timeout is not None and not config.client_timeout > 0:
            raise ValueError(f"client_timeout must be positive or None, got {config.client_timeout}")
        self.strategy = strategy
        self.clients = clients
        self.config = config
        self.state: State = strategy.init_state(num_features, num_classes, derive_seed(config.seed, "init"))
        strategy.setup(clients, derive_seed(config.seed, "setup"))
        self.history: list[RoundRecord] = []
        self.round = 0
        self.endpoints: list[ClientEndpoint] = [LocalClient(strategy, d, config.train) for d in clients]
        if client_wrapper is not None:
            self.endpoints = [client_wrapper(i, e) for i, e in enumerate(self.endpoints)]
        if config.checkpoint is not None:
            clean_stale_temps(config.checkpoint)  # an earlier save killed before its rename
            if Path(config.checkpoint).exists():
                self.load_checkpoint(config.checkpoint)

    def select_clients(self, round: int) -> list[int]:
        """The clients of ``round``: a seeded sample without replacement, in ascending id order."""
        return select_clients(self.config.seed, round, len(self.clients), self.config.clients_per_round)

    def run_client(self, client_id: int, round: int) -> tuple[ClientResult, int]:
        """One client's round trip through real serialisation. Returns its checked result and the
        bytes sent down.

        Raises:
            PayloadError: the request or upload fails its spec.
            ClientTimeout: the client missed ``config.client_timeout``.
            ClientSentNothing: the client answered with no upload.
            Exception: whatever the client raised (a crash).
        """
        s, seed = self.strategy, client_seed(self.config.seed, round, client_id)
        endpoint, timeout = self.endpoints[client_id], self.config.client_timeout
        bytes_up = 0
        raw_req = call_with_deadline(lambda: endpoint.request(round, seed), timeout)
        request = None
        if raw_req is not None:
            bytes_up += len(raw_req)
            spec = s.request_spec(self.state)
            if spec is None:
                raise pl.PayloadError(f"strategy {s.name} takes no client request")
            request = pl.decode(raw_req, bounded(spec, self.config.max_upload_bytes))
        down = s.client_payload(self.state, client_id, request, round, seed)
        raw_down = pl.encode(down)
        raw_up = call_with_deadline(lambda: endpoint.update(raw_down, round, seed), timeout)
        if raw_up is None or len(raw_up) == 0:
            raise ClientSentNothing("sent no upload")
        bytes_up += len(raw_up)
        checked = pl.decode(raw_up, bounded(s.upload_spec(self.state, down), self.config.max_upload_bytes))
        s.check_upload(self.state, down, checked)
        return ClientResult(client_id, checked, len(self.clients[client_id]), bytes_up), len(raw_down)

    def run_round(self) -> RoundRecord:
        """Select, train, check and aggregate one round. A client that crashes, times out, sends
        nothing or has its upload rejected is recorded in ``failed`` with the reason and left out;
        the state changes only at the end, and not at all if no client succeeded."""
        t0 = time.perf_counter()
        r = self.round
        chosen = self.select_clients(r)
        results: list[ClientResult] = []
        failed: list[tuple[int, str]] = []
        down_total = 0
        for c in chosen:
            try:
                res, down = self.run_client(c, r)
            except Exception as e:  # anything in this client's exchange fails this client only
                failed.append((c, failure_reason(e)))
                continue
            down_total += down
            results.append(res)
        self.state, skipped = aggregate_round(self.strategy, self.state, results, r)
        rec = RoundRecord(r, chosen, failed, down_total, sum(x.bytes_up for x in results), skipped=skipped)
        rec.seconds = time.perf_counter() - t0
        self.history.append(rec)
        self.round += 1
        return rec

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the state, round counter, history and run identity to ``path`` atomically."""
        meta = {"round": self.round, "history": [record_to_json(h) for h in self.history], **self._identity()}
        save_checkpoint(path, self.state, meta)

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from a checkpoint written by :meth:`save_checkpoint` for the same run.

        Raises:
            PayloadError: the file is not a checkpoint of this state's shapes, is damaged (checksum)
                or has malformed metadata (the message names the path and the field).
            ValueError: it was written by a run with another seed, strategy, strategy options,
                TrainConfig or clients (the message names what differs).
        """
        state, meta = load_checkpoint(path, self.state)
        check_identity(meta, self._identity(), path)
        self.state = state
        self.round = int(meta["round"])
        self.history = [record_from_json(h) for h in meta["history"]]

    def _identity(self) -> dict:
        return run_identity(self.strategy, self.config, len(self.clients))

    def evaluate(
        self,
        test: ClientData,
        ks: tuple[int, ...] | None = None,
        batch: int = 4096,
        inv_propensity: torch.Tensor | None = None,
        frequent: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Ranking metrics of the global model on ``test`` (PSP@k with ``inv_propensity`` float ``[p]``,
        frequent/infrequent P@k with ``frequent`` bool ``[p]``: see :func:`fedkernels.metrics.ranking_metrics`)."""
        ks = ks or self.config.eval_k
        kmax = min(max(ks), test.num_classes)
        preds = [
            self.strategy.predict_topk(self.state, test.x[i : i + batch], kmax) for i in range(0, len(test), batch)
        ]
        topk = torch.cat(preds) if preds else torch.empty(0, kmax, dtype=torch.int64)
        return ranking_metrics(
            topk, test.indptr, test.indices, tuple(k for k in ks if k <= kmax), inv_propensity, frequent
        )

    def run(
        self, test: ClientData | None = None, on_round: Callable[[RoundRecord], None] | None = None
    ) -> list[RoundRecord]:
        """Run the remaining rounds of the config; evaluate on ``test`` every ``eval_every`` rounds."""
        while self.round < self.config.rounds:
            rec = self.run_round()
            if test is not None and (rec.round + 1) % self.config.eval_every == 0:
                rec.metrics = self.evaluate(test)
            if self.config.checkpoint is not None:
                self.save_checkpoint(self.config.checkpoint)
            if on_round is not None:
                on_round(rec)
        return self.history


def select_clients(seed: int, round: int, num_clients: int, clients_per_round: int) -> list[int]:
    """The clients of ``round`` of the run seeded ``seed``: ascending ids (shared with Flower)."""
    rng = numpy_rng(seed, "select", round)
    return sorted(int(c) for c in rng.choice(num_clients, size=clients_per_round, replace=False))


def bounded(spec: pl.PayloadSpec, max_bytes: int | None) -> pl.PayloadSpec:
    """``spec`` with its byte limit lowered to ``max_bytes`` (if given)."""
    return spec if max_bytes is None else dataclasses.replace(spec, max_bytes=min(spec.max_bytes, max_bytes))


def client_seed(seed: int, round: int, client_id: int) -> int:
    """The seed of one client's work in one round (shared with Flower)."""
    return derive_seed(seed, "client", round, client_id)


def run_identity(strategy: Strategy, config: RunConfig, num_clients: int) -> dict:
    """What a checkpoint must match to be resumed by a run (as it reads back from JSON)."""
    ident = {
        "strategy": strategy.name,
        "seed": config.seed,
        "num_clients": num_clients,
        "clients_per_round": config.clients_per_round,
        "train": dataclasses.asdict(config.train),
        "strategy_options": strategy.options(),
    }
    return json.loads(json.dumps(ident))


def check_identity(meta: dict, mine: dict, path: str | Path) -> None:
    """Raise ``ValueError`` naming the first field (``train.lr``, ``strategy_options.loss``, ...)
    where the checkpoint's run identity ``meta`` differs from this run's ``mine``."""
    for key, want in mine.items():
        have = meta.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            for sub in sorted(set(want) | set(have)):
                if have.get(sub) != want.get(sub):
                    raise ValueError(
                        f"checkpoint {path} has {key}.{sub}={have.get(sub)!r}, this run has {want.get(sub)!r}"
                    )
        elif have != want:
            raise ValueError(f"checkpoint {path} has {key}={have!r}, this run has {want!r}")


def aggregate_round(strategy: Strategy, state: State, results: list[ClientResult], round: int) -> tuple[State, str]:
    """The state after a round and why its update was skipped ("" if applied or nobody succeeded).

    A round whose successful clients all hold 0 examples has nothing to average (example-weighted
    averages have no weight): the state is kept and the reason recorded, instead of aborting the run.
    """
    if not results:
        return state, ""
    if sum(r.num_examples for r in results) <= 0:
        return state, f"update skipped: the {len(results)} successful clients hold 0 examples"
    return strategy.aggregate(state, results, round), ""


def record_to_json(rec: RoundRecord) -> dict:
    return dataclasses.asdict(rec)


class ClientSentNothing(Exception):
    """A client answered without an upload."""


def failure_reason(e: Exception) -> str:
    """The ``RoundRecord.failed`` reason for a client failure: "rejected: ...", "timed out ...",
    "sent no upload" or "crashed: <type>: <message>"."""
    if isinstance(e, pl.PayloadError):
        return f"rejected: {e}"
    if isinstance(e, (ClientTimeout, ClientSentNothing)):
        return str(e)
    return f"crashed: {type(e).__name__}: {e}"


def record_from_json(d: dict) -> RoundRecord:
    d = dict(d)
    d["failed"] = [(int(c), str(why)) for c, why in d["failed"]]
    return RoundRecord(**d)
