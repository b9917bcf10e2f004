"""A small Flower App for tests and benchmarks of fedkernels over Flower, with its in-process twin.

Each node generates only its own shard (:func:`shard`: a seeded draw of that client's rows, where
features reveal the labels so training helps), so a run with 1000 virtual clients costs each node
one shard, never the whole dataset. The same shards feed :func:`in_process_run`, the in-process
:class:`fedkernels.fl.Server` run a Flower run must equal bit for bit.

Two ways to run it:
- ``flwr run`` (the app's components are ``fedkernels.testing.flower_sim:server`` and ``:client``;
  their settings come from ``run_config``, keys :data:`SETTINGS`), e.g. the benchmark
  ``bench/fl/flower_sim.py`` and ``examples/flower_app``;
- :func:`apps` builds the two apps with fixed :class:`Settings` for Flower's Python entry point
  ``flwr.simulation.run_simulation`` (no config file, one process tree), as the CI test does.

With ``cohort`` (run_config ``cohort = true``) the ServerApp is a
:class:`~fedkernels.integrations.flower.CohortFlowerStrategy` and the nodes are cohort nodes (the
ClientApp ``:cohort_client``, or :func:`apps` with bound settings): each serves block ``partition-id`` of
``num-partitions`` of the clients and generates only its sampled clients' shards; ``batch_clients``
trains them (and the in-process twin's rounds) with the batched pass.

A run writes its outcome to ``settings.result`` (JSON): the checkpoint path, per-round seconds,
discovery seconds, node events.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch
from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

from ..experiments.configuration import ExperimentConfig
from ..fl import ClientData, RunConfig, Server, Strategy
from ..fl.registry import make_strategy as registered
from ..fl.seeding import generator
from ..fl.types import RoundRecord
from ..integrations.flower import (
    CohortFlowerStrategy,
    FlowerStrategy,
    client_app,
    cohort_client_app,
    partition_id,
    server_app,
)
from .flower_faults import hostile_mod, silent_where_faulty

# Small options per strategy for the small data; a registered strategy not listed runs with its defaults.
OPTIONS: dict[str, dict[str, object]] = {
    "fedavg": dict(hidden=(8,)),
    "fedmlh": dict(num_tables=2, num_buckets=4, hidden=(8,)),
    "partialexchange": dict(fraction=0.5, hidden=(8,)),
    "fedss": dict(num_negatives=3, embed_dim=8, hidden=(8,)),
    "l1diff": dict(gamma=0.01, hidden=(8,)),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """One run: the strategy by name, the clients, rounds and local work, where results go."""

    strategy: str = "fedavg"
    num_clients: int = 10
    clients_per_round: int = 10
    rounds: int = 2
    seed: int = 0
    examples: int = 16  # rows per client (each client's count varies by up to +50%)
    num_features: int = 16
    num_classes: int = 8
    hidden: int = 8
    epochs: int = 1
    timeout: float = 60.0  # seconds per message
    eval_clients: int = 0  # clients per federated evaluation (0: no federated evaluation)
    fault_rate: float = 0.0  # share of train replies turned hostile (:mod:`.flower_faults`)
    max_in_flight: int = 0  # messages out at once (0: all)
    startup_grace: float = 600.0  # seconds to wait for every node before round 1 (ends when all answered)
    checkpoint: str = ""
    result: str = ""
    cohort: bool = False  # cohort nodes: each node serves a shard of the clients (run with few nodes)
    batch_clients: bool = False  # the batched pass (in process, and on cohort nodes)

    def run_config(self) -> RunConfig:
        """The loop's settings: this run's, and otherwise RunConfig's and TrainConfig's defaults."""
        cfg = ExperimentConfig(
            rounds=self.rounds,
            clients_per_round=self.clients_per_round,
            seed=self.seed,
            local_epochs=self.epochs,
            batch_size=16,
            lr=0.3,
            optimizer="sgd",
            autocast="off",
            eval_every=1,
            ks=[1, 3, 5],
            device="cpu",
            client_weighting="samples",
            batch_clients=self.batch_clients,
            dp_delta=1e-5,
            dp_sample_clip=None,
            dp_sample_noise=0.0,
            dp_seeded=False,
        )
        return cfg.run_config(
            client_timeout=self.timeout, checkpoint=self.checkpoint or None, eval_clients=self.eval_clients or None
        )


SETTINGS = tuple(f.name.replace("_", "-") for f in dataclasses.fields(Settings))  # the run_config keys


def settings_from(context: Context) -> Settings:
    """:class:`Settings` from Flower's ``run_config`` (keys :data:`SETTINGS`; missing: defaults)."""
    c, out, defaults = context.run_config, {}, Settings()
    for f in dataclasses.fields(Settings):
        key = f.name.replace("_", "-")
        if key in c:
            out[f.name] = type(getattr(defaults, f.name))(c[key])
    return Settings(**out)


def make_strategy(s: Settings) -> Strategy:
    """The run's strategy (small options; ``hidden`` from the settings)."""
    opts: dict[str, object] = {**OPTIONS.get(s.strategy.lower(), {})}
    if "hidden" in opts:
        opts["hidden"] = (s.hidden,)
    return registered(s.strategy, **opts)


def shard(client: int, s: Settings, held_out: bool = False) -> ClientData:
    """Client ``client``'s rows, drawn from a stream of its own (no other client's data is made):
    float32 ``[n, F]`` features; class c is on when feature c > 0.7."""
    g = generator(s.seed, "flower-sim", "held-out" if held_out else "train", client)
    n = s.examples + int(torch.randint(0, s.examples // 2 + 1, (1,), generator=g))
    x = torch.randn(n, s.num_features, generator=g)
    on = x[:, : s.num_classes] > 0.7
    indptr = torch.zeros(n + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(on.sum(1), 0)
    return ClientData(x, indptr, torch.nonzero(on)[:, 1].to(torch.int64), s.num_classes)


def in_process_run(s: Settings, threads: int | None = 1) -> Server:
    """The in-process run a Flower run of ``s`` must equal (same shards, seeds and settings), with
    torch on ``threads`` threads (``None``: as set). Flower's simulation workers run one thread each
    (Ray sets ``OMP_NUM_THREADS`` to a worker's CPUs), and torch's matrix products may round
    differently on another thread count, so the reference runs on one too."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        clients = [shard(c, s) for c in range(s.num_clients)]
        cfg = dataclasses.replace(s.run_config(), checkpoint=None)
        if s.batch_clients:  # the in-process batched pass runs only without a per-call deadline
            cfg = dataclasses.replace(cfg, client_timeout=None)
        wrapper = silent_where_faulty(s.seed, s.fault_rate) if s.fault_rate else None
        server = Server(make_strategy(s), clients, s.num_features, s.num_classes, cfg, client_wrapper=wrapper)
        held = [shard(c, s, held_out=True) for c in range(s.num_clients)] if s.eval_clients else None
        server.run(held_out=held)
    finally:
        torch.set_num_threads(before)
    return server


class _Outcome:
    """Writes the run's outcome to ``settings.result`` after each round and at the end."""

    def __init__(self, s: Settings) -> None:
        self.s, self.t0 = s, time.perf_counter()
        self.rounds: list[dict[str, float]] = []

    def round(self, fk: FlowerStrategy, rec: RoundRecord) -> None:
        self.rounds.append({"round": rec.round, "seconds": rec.seconds, "wall": time.perf_counter() - self.t0})
        self.write(fk, done=False)

    def write(self, fk: FlowerStrategy, done: bool) -> None:
        if not self.s.result:
            return
        out = {
            "done": done,
            "discovery_seconds": fk.discovery_seconds,
            "resumed_from": fk.resumed_from,
            "rounds": self.rounds,
            "failed": [h.failed for h in fk.history],
            "events": [dataclasses.asdict(e) for e in fk.nodes.events if e.kind != "joined"],
            "joined": sum(e.kind == "joined" for e in fk.nodes.events),
            "messages": dict(fk.messages_sent),
        }
        Path(self.s.result).write_text(json.dumps(out))


def apps(s: Settings | None = None) -> tuple[ServerApp, ClientApp]:
    """The ServerApp and ClientApp of a run: with ``s``, bound to it (for ``run_simulation``);
    without, each reads its :class:`Settings` from ``run_config`` (for ``flwr run``)."""

    def settings(ctx: Context) -> Settings:
        return s if s is not None else settings_from(ctx)

    outcomes: dict[int, _Outcome] = {}

    def flower_strategy(ctx: Context) -> FlowerStrategy:
        st = settings(ctx)
        outcomes[id(ctx)] = _Outcome(st)
        if st.cohort:
            return CohortFlowerStrategy(
                make_strategy(st),
                st.num_features,
                st.num_classes,
                st.num_clients,
                st.run_config(),
                startup_grace=st.startup_grace,
                max_in_flight=st.max_in_flight or None,
            )
        return FlowerStrategy(
            make_strategy(st),
            st.num_features,
            st.num_classes,
            st.num_clients,
            st.run_config(),
            federated_evaluation=st.eval_clients > 0,
            startup_grace=st.startup_grace,
            max_in_flight=st.max_in_flight or None,
        )

    server = server_app(
        flower_strategy,
        on_round=lambda ctx, fk, rec: outcomes[id(ctx)].round(fk, rec),
        on_done=lambda ctx, fk: outcomes[id(ctx)].write(fk, done=True),
    )
    if s is not None and s.cohort:  # bound settings: the node's shard from its partition-id
        return server, cohort_client_app(lambda ctx: make_strategy(s), lambda ctx, c: shard(c, s))
    mods = None
    if s is not None and s.fault_rate:  # a mod is fixed when the app is built: only with bound settings
        mods = [hostile_mod(s.seed, s.fault_rate, l1diff=s.strategy.lower() == "l1diff")]
    client = client_app(
        lambda ctx: make_strategy(settings(ctx)),
        lambda ctx: shard(partition_id(ctx), settings(ctx)),
        load_eval_data=lambda ctx: shard(partition_id(ctx), settings(ctx), held_out=True),
        mods=mods,
    )
    return server, client


server, client = apps()
# the cohort ClientApp of ``flwr run`` (its settings from run_config; the server reads ``cohort = true``)
cohort_client = cohort_client_app(
    lambda ctx: make_strategy(settings_from(ctx)), lambda ctx, c: shard(c, settings_from(ctx))
)
