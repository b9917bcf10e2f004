"""Cohort nodes (fedkernels.integrations.flower.cohort_server): a few Flower nodes each serve a shard of
the clients and get one message per round. Fast, without processes: the real CohortFlowerStrategy and
cohort_client_app talk through real Flower Messages and ArrayRecords on the in-memory grid
(support/flower_grid.py). Runs end bit-identical to the in-process Server of the same seed; malformed
replies and shard claims are refused with the reason; a run config asking for private rounds gets the
private cohort strategy (python_tests/privacy/test_flower_cohort_private.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

from flwr.app import ArrayRecord, Context, Message, RecordDict

from fedkernels.integrations.flower import (
    CohortFlowerStrategy,
    ShardRegistry,
    client_app,
    cohort_client_app,
    cohort_strategy_from,
    node_shard,
)
from fedkernels.integrations.flower import protocol as pr
from fedkernels.integrations.flower.cohort_replies import MISSING
from fedkernels.integrations.flower.nodes import GONE
from fedkernels.testing.flower_sim import Settings, in_process_run, make_strategy, shard
from python_tests.support.flower_grid import MemoryGrid, task_identity

RUNS = iter(range(1000, 2000))  # a run id per test: the client apps cache per run and node


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    task_identity(monkeypatch)


def cohort_grid(s: Settings, nodes: int, tamper=None, configs=None) -> MemoryGrid:
    """``nodes`` cohort nodes (ids 10, 11, ...) serving the blocks of ``s.num_clients``; ``tamper(node,
    message, reply)`` may change a node's train reply; ``configs[i]`` replaces node i's node config."""
    app = cohort_client_app(lambda ctx: make_strategy(s), lambda ctx, c: shard(c, s))
    run = next(RUNS)

    def node_app(node: int):
        def call(message: Message, ctx: Context) -> Message:
            reply = app(message, ctx)
            if tamper is not None and message.metadata.message_type == "train":
                tamper(node, message, reply)
            return reply

        return call

    apps = {}
    for i in range(nodes):
        config = (configs or {}).get(i, {"partition-id": i, "num-partitions": nodes})
        apps[10 + i] = (node_app(10 + i), Context(run, 10 + i, config, RecordDict(), {}))
    return MemoryGrid(apps)


def run_cohort(s: Settings, nodes: int, **grid) -> CohortFlowerStrategy:
    fk = CohortFlowerStrategy(
        make_strategy(s), s.num_features, s.num_classes, s.num_clients, s.run_config(), startup_grace=0.0
    )
    fk.start(cohort_grid(s, nodes, **grid))
    return fk


def assert_same_run(fk: CohortFlowerStrategy, ref) -> None:
    assert all(fk.state[k].dtype == v.dtype and torch.equal(fk.state[k], v) for k, v in ref.state.items())
    for got, want in zip(fk.history, ref.history, strict=True):
        assert (got.clients, got.failed, got.bytes_down, got.bytes_up) == (
            want.clients,
            want.failed,
            want.bytes_down,
            want.bytes_up,
        )


# FedAvg through the batched pass and the sequential loop, FedSS with its per-client requests (one
# request query per node), l1-difference with its codec uploads: each bit-identical to in process.
@pytest.mark.parametrize(
    ("strategy", "batch", "nodes"),
    [("fedavg", True, 3), ("fedavg", False, 2), ("fedss", False, 3), ("l1diff", False, 4)],
)
def test_cohort_nodes_match_in_process(strategy, batch, nodes):
    s = Settings(strategy=strategy, num_clients=30, clients_per_round=12, rounds=2, seed=3, batch_clients=batch)
    fk = run_cohort(s, nodes)
    assert_same_run(fk, in_process_run(s, threads=None))
    assert [e.kind for e in fk.nodes.events] == ["joined"] * nodes
    assert sorted(fk.nodes.shard_of.values()) == [node_shard({"partition-id": i, "num-partitions": nodes}, 30)
                                                  for i in range(nodes)]  # fmt: skip
    # one identify per node, then one message per node that holds a chosen client, per round
    per_round = [len({fk.nodes.node_of[c] for c in h.clients}) for h in fk.history]
    assert fk.messages_sent[pr.IDENTIFY] == nodes and fk.messages_sent["train"] == sum(per_round)
    if strategy == "fedss":
        assert fk.messages_sent[pr.COHORT_REQUEST] == sum(per_round)


def cohort_strategy(s: Settings) -> CohortFlowerStrategy:
    return CohortFlowerStrategy(
        make_strategy(s), s.num_features, s.num_classes, s.num_clients, s.run_config(), startup_grace=0.0
    )


def request_groups(grid: MemoryGrid) -> list[str]:
    """The group (``request-<round>``) of every request query pushed, in order."""
    return [m.metadata.group_id for m in grid.sent if m.metadata.message_type == pr.COHORT_REQUEST]


def test_the_next_rounds_requests_are_asked_while_this_round_aggregates():
    """FedSS takes a request from each client: round r+1's request queries are pushed after round r's
    train replies came and before they are aggregated (the nodes answer while the server aggregates),
    once per node holding a chosen client, none after the last round; the run equals in process."""
    s = Settings(strategy="fedss", num_clients=30, clients_per_round=12, rounds=3, seed=5)
    grid, fk = cohort_grid(s, 3), cohort_strategy(s)
    asked_before_aggregating = []
    aggregate = fk.aggregate_train

    def spy(server_round, replies):
        asked_before_aggregating.append(request_groups(grid)[-1])
        return aggregate(server_round, replies)

    fk.aggregate_train = spy
    fk.start(grid)
    assert_same_run(fk, in_process_run(s, threads=None))
    per_round = [len({fk.nodes.node_of[c] for c in h.clients}) for h in fk.history]
    assert request_groups(grid) == [f"request-{r}" for r in range(3) for _ in range(per_round[r])]
    assert asked_before_aggregating == ["request-1", "request-2", "request-2"]
    assert fk.messages_sent[pr.COHORT_REQUEST] == sum(per_round)


def test_requests_asked_early_of_a_node_that_left_are_dropped_and_asked_again():
    """A node leaves while round 1 aggregates, after round 2's requests were asked of it: round 2's
    refreshed shard map differs, so the early queries are dropped (not waited for) and the live
    clients asked again; the node's clients fail "gone", as when nothing is asked early."""
    s = Settings(strategy="fedss", num_clients=30, clients_per_round=12, rounds=2, seed=5)

    def run(early: bool) -> tuple[CohortFlowerStrategy, MemoryGrid]:
        grid, fk = cohort_grid(s, 3), cohort_strategy(s)
        aggregate = fk.aggregate_train

        def leave_in_round_1(server_round, replies):
            if server_round == 1:
                grid.offline.add(11)
            return aggregate(server_round, replies)

        fk.aggregate_train = leave_in_round_1
        if not early:
            fk._ask_early = lambda grid, r: None
        fk.start(grid)
        return fk, grid

    fk, grid = run(early=True)
    ref, _ = run(early=False)
    assert_same_run(fk, ref)
    a, b = node_shard({"partition-id": 1, "num-partitions": 3}, 30)
    gone = [c for c in fk.history[1].clients if a <= c < b]
    assert gone and fk.history[1].failed == [(c, GONE) for c in gone]
    groups = request_groups(grid)
    assert groups.count("request-1") == 3 + 2  # asked early of all three, then of the two left


def test_a_node_trains_its_cohort_in_one_batched_pass(monkeypatch):
    """With batch_clients the node hands its sampled clients to the batched pass together (once per
    round), as the in-process loop does."""
    import fedkernels.fl.server as server_module

    calls = []
    real = server_module.batched_client_updates

    def spy(strategy, data, *args):
        calls.append(sorted(data))
        return real(strategy, data, *args)

    monkeypatch.setattr(server_module, "batched_client_updates", spy)
    s = Settings(num_clients=20, clients_per_round=10, rounds=1, seed=1, batch_clients=True)
    fk = run_cohort(s, 2)
    chosen = fk.history[0].clients
    assert sorted(c for call in calls for c in call) == chosen and len(calls) == 2
    assert all(len({fk.nodes.node_of[c] for c in call}) == 1 for call in calls)


def test_copies_of_a_node_app_share_the_node_in_one_process():
    """Flower's simulation engine ships the ClientApp to its worker with every message (a fresh
    unpickled copy each time): the copies find the node's strategy and cached clients made by the
    first, so a node builds its strategy once and loads each client once, and the run is unchanged."""
    cloudpickle = pytest.importorskip("ray.cloudpickle", reason="ray is not installed (fedkernels[simulation])")
    s = Settings(num_clients=12, clients_per_round=12, rounds=3, seed=2, batch_clients=True)
    _SEEN.clear()

    def make(ctx):
        _seen("made", ctx.node_id)
        return make_strategy(s)

    def load(ctx, c):
        _seen("loads", c)
        return shard(c, s)

    shipped = cloudpickle.dumps(cohort_client_app(make, load))
    run = next(RUNS)

    def copy_per_message(message: Message, ctx: Context) -> Message:
        return cloudpickle.loads(shipped)(message, ctx)

    grid = MemoryGrid({1: (copy_per_message, Context(run, 1, {"shard": "0:12"}, RecordDict(), {}))})
    fk = CohortFlowerStrategy(make_strategy(s), s.num_features, s.num_classes, 12, s.run_config(), startup_grace=0.0)
    fk.start(grid)
    assert_same_run(fk, in_process_run(s, threads=None))
    # the copies share one process's state, not the (empty) state pickled with each copy
    assert _SEEN["made"] == [1] and sorted(_SEEN["loads"]) == list(range(12))


_SEEN: dict[str, list[int]] = {}  # what the copies did, in this process


def _seen(kind: str, value: int) -> None:
    """Module-level, so pickled by reference: every copy of a closure calling it reaches this list."""
    _SEEN.setdefault(kind, []).append(value)


# ---- malformed replies: the whole reply, or one client ---------------------------------------------
def drop_first(node, message, reply):
    head = reply.content[pr.KEY]
    c = head["clients"][0]
    for field in ("clients", "round-tags", "num-examples"):
        head[field] = head[field][1:]
    del reply.content[pr.cohort_key(c)]


def name_a_stranger(node, message, reply):
    head = reply.content[pr.KEY]
    stranger = max(message.content[pr.KEY]["clients"]) + 1
    head["failed"] = [*head["failed"], stranger]
    head["failed-reasons"] = [*head["failed-reasons"], "made up"]


def one_upload_too_many(node, message, reply):
    reply.content[f"{pr.PAYLOAD}.extra"] = ArrayRecord()


def replay_tag(node, message, reply):
    head = reply.content[pr.KEY]
    head["round-tags"] = ["0"] * len(head["round-tags"])  # round 0's tag in every round


def test_a_reply_missing_a_client_fails_that_client_only():
    s = Settings(num_clients=12, clients_per_round=8, rounds=1, seed=2)
    fk = run_cohort(s, 2, tamper=drop_first)
    rec = fk.history[0]
    first = [min(c for c in rec.clients if fk.nodes.node_of[c] == n) for n in (10, 11)]
    assert rec.failed == [(c, MISSING) for c in sorted(first)]
    assert rec.contributed == sorted(set(rec.clients) - set(first))


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        (name_a_stranger, "rejected: reply names client(s) [{stranger}] not sent to its node"),
        (one_upload_too_many, "rejected: reply carries {n} uploads, its node was sent {m} clients"),
    ],
)
def test_a_malformed_reply_fails_every_client_of_its_node(tamper, reason):
    s = Settings(num_clients=12, clients_per_round=8, rounds=1, seed=2)
    bad = 10

    def only_node_10(node, message, reply):
        if node == bad:
            tamper(node, message, reply)

    fk = run_cohort(s, 2, tamper=only_node_10)
    rec = fk.history[0]
    mine = [c for c in rec.clients if fk.nodes.node_of[c] == bad]
    want = reason.format(stranger=max(mine) + 1, n=len(mine) + 1, m=len(mine))
    assert rec.failed == [(c, want) for c in mine]
    assert rec.contributed == [c for c in rec.clients if c not in mine]  # the other node's uploads count
    assert not fk.history[0].skipped


def test_replayed_round_tags_are_refused_per_client():
    s = Settings(num_clients=12, clients_per_round=6, rounds=2, seed=4)
    fk = run_cohort(s, 2, tamper=replay_tag)
    assert fk.history[0].failed == []  # round 0's tag is right in round 0
    assert [c for c, _ in fk.history[1].failed] == fk.history[1].clients
    assert all("tagged for round '0', this is round 1" in why for _, why in fk.history[1].failed)


# ---- shard claims ------------------------------------------------------------------------------------
def test_an_overlapping_shard_is_refused_and_stands_by():
    reg = ShardRegistry(10)
    reg.claim(0, 1, 0, 6, None)
    reg.claim(0, 2, 4, 10, None)  # overlaps node 1's
    reg.claim(0, 3, 6, 10, None)
    assert reg.refused == {2: "shard [4, 10) overlaps node 1's [0, 6)"}
    assert reg.complete() and reg.node_of[5] == 1 and reg.node_of[6] == 3
    reg.refresh(1, {2, 3})  # node 1 leaves: clients 0..5 are gone; node 2 still overlaps node 3
    assert reg.failure(0) == "gone (node left)" and 2 in reg.standby and not reg.complete()
    reg.refresh(2, {2})  # node 3 leaves too: node 2 takes over [4, 10)
    assert [(e.kind, e.node, e.shard) for e in reg.events[-3:]] == [
        ("left", 1, [0, 6]),
        ("left", 3, [6, 10]),
        ("took over", 2, [4, 10]),
    ]
    assert {reg.node_of[c] for c in range(4, 10)} == {2} and 0 not in reg.node_of


@pytest.mark.parametrize(
    ("start", "stop", "why"),
    [(0, 11, "not a non-empty range within [0, 10)"), (3, 3, "not a non-empty range"), ("0", 4, "claims shard")],
)
def test_a_shard_outside_the_clients_is_refused(start, stop, why):
    reg = ShardRegistry(10)
    reg.claim(0, 1, start, stop, None)
    assert why in reg.refused[1] and not reg.node_of


@given(st.integers(1, 500), st.integers(1, 40))
def test_partition_blocks_cover_the_clients_once(n, parts):
    blocks = [node_shard({"partition-id": i, "num-partitions": parts}, n) for i in range(parts)]
    assert [c for a, b in blocks for c in range(a, b)] == list(range(n))


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"shard": "3-9"}, "start:stop"),
        ({"shard": "a:b"}, "start:stop"),
        ({"partition-id": 2}, "num-partitions"),
        ({"partition-id": 4, "num-partitions": 4}, r"in \[0, num-partitions=4\)"),
    ],
)
def test_bad_node_configs_name_the_field(config, match):
    with pytest.raises(ValueError, match=match):
        node_shard(config, 10)


def test_overlapping_nodes_in_a_run_leave_their_clients_to_the_first():
    """Nodes configured with explicit shards, the last overlapping the first: it is refused, the run
    goes on with the others' shards and ends as in process."""
    s = Settings(num_clients=12, clients_per_round=6, rounds=1, seed=5)
    configs = {0: {"shard": "0:7"}, 1: {"shard": "7:12"}, 2: {"shard": "5:9"}}
    fk = run_cohort(s, 3, configs=configs)
    assert fk.nodes.refused == {12: "shard [5, 9) overlaps node 10's [0, 7)"}
    assert_same_run(fk, in_process_run(s, threads=None))


def test_a_per_client_node_is_refused_by_a_cohort_run():
    s = Settings(num_clients=4, clients_per_round=2, rounds=1, seed=0)
    cohort = cohort_client_app(lambda ctx: make_strategy(s), lambda ctx, c: shard(c, s))
    single = client_app(lambda ctx: make_strategy(s), lambda ctx: shard(0, s))
    run = next(RUNS)
    grid = MemoryGrid(
        {
            1: (cohort, Context(run, 1, {"shard": "0:4"}, RecordDict(), {})),
            2: (single, Context(run, 2, {"partition-id": 0}, RecordDict(), {})),
        }
    )
    fk = CohortFlowerStrategy(make_strategy(s), 16, 8, 4, s.run_config(), startup_grace=0.0)
    fk.start(grid)
    assert fk.nodes.refused[2].startswith("not a cohort node (it claims client 0")
    assert fk.history[0].failed == []


# ---- what cohort nodes do not run ---------------------------------------------------------------------
def test_private_rounds_get_the_private_cohort_strategy():
    pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
    from fedkernels.integrations.flower.cohort_private_server import CohortPrivateFlowerStrategy

    run = {"num-clients": 10, "clients-per-round": 10, "secagg": True, "secagg-corrupt-fraction": 0.2}
    ctx = Context(1, 0, {}, RecordDict(), run)
    fk = cohort_strategy_from(ctx, make_strategy(Settings()), 16, 8)
    assert isinstance(fk, CohortPrivateFlowerStrategy) and fk.privacy.secagg and fk.colluding_nodes == 1
    bad = Context(1, 0, {}, RecordDict(), {**run, "colluding-nodes": -1})
    with pytest.raises(ValueError, match="colluding-nodes"):
        cohort_strategy_from(bad, make_strategy(Settings()), 16, 8)
    quiet = Context(1, 0, {}, RecordDict(), {"num-clients": 10, "clients-per-round": 4, "secagg": False})
    assert isinstance(cohort_strategy_from(quiet, make_strategy(Settings()), 16, 8), CohortFlowerStrategy)


def test_unsupported_options_are_refused():
    s = Settings()
    cfg = dataclasses.replace(s.run_config(), clients_per_round=2)
    with pytest.raises(NotImplementedError, match="federated evaluation"):
        CohortFlowerStrategy(make_strategy(s), 16, 8, 10, cfg, federated_evaluation=True)
    with pytest.raises(ValueError, match="partition_keys"):
        CohortFlowerStrategy(make_strategy(s), 16, 8, 10, cfg, partition_keys={0: b"k"})


def test_dp_sgd_runs_per_client_on_a_cohort_node():
    """DP-SGD in local training (seeded noise): each client's clipped, noised steps on its node, the
    run bit-identical to in process, with the same sample-level epsilon."""
    pytest.importorskip("dp_accounting", reason="DP-SGD's accountant needs fedkernels[privacy]")
    from fedkernels.fl import Server

    s = Settings(num_clients=12, clients_per_round=6, rounds=2, seed=9, batch_clients=True)
    base = s.run_config()
    train = dataclasses.replace(base.train, dp_sample_clip=1.0, dp_sample_noise=0.8, dp_sample_seeded=True)
    cfg = dataclasses.replace(base, train=train, client_timeout=None)
    fk = CohortFlowerStrategy(make_strategy(s), s.num_features, s.num_classes, s.num_clients, cfg, startup_grace=0.0)
    fk.start(cohort_grid(s, 2))
    ref = Server(make_strategy(s), [shard(c, s) for c in range(s.num_clients)], s.num_features, s.num_classes, cfg)
    ref.run()
    assert_same_run(fk, ref)
    eps = [h.privacy["sample_epsilon"] for h in fk.history]
    assert eps == [h.privacy["sample_epsilon"] for h in ref.history] and eps[-1] > 0


def test_a_node_refuses_clients_outside_its_shard():
    """A node whose shard changed since it was identified (here: its node config) refuses a message
    naming clients outside its shard; those clients fail the round with the node's reason."""
    s = Settings(num_clients=12, clients_per_round=6, rounds=1, seed=2)
    grid = cohort_grid(s, 2)
    app, ctx = grid.apps[10]
    moved = Context(ctx.run_id, ctx.node_id, {"shard": "6:12"}, RecordDict(), {})
    grid.apps[10] = (lambda m, c: app(m, moved if m.metadata.message_type == "train" else c), ctx)
    fk = CohortFlowerStrategy(make_strategy(s), 16, 8, 12, s.run_config(), startup_grace=0.0)
    fk.start(grid)
    rec = fk.history[0]
    mine = [c for c in rec.clients if c < 6]
    assert [c for c, _ in rec.failed] == mine and mine
    assert all("not in this node's shard [6, 12)" in why for _, why in rec.failed)


def test_a_node_loads_only_its_sampled_clients_and_keeps_a_bounded_cache():
    s = Settings(num_clients=40, clients_per_round=8, rounds=3, seed=6)
    loads: list[int] = []

    def load(ctx, c):
        loads.append(c)
        return shard(c, s)

    app = cohort_client_app(lambda ctx: make_strategy(s), load, cache_clients=2)
    run = next(RUNS)
    grid = MemoryGrid({1: (app, Context(run, 1, {"shard": "0:40"}, RecordDict(), {}))})
    fk = CohortFlowerStrategy(make_strategy(s), 16, 8, 40, s.run_config(), startup_grace=0.0)
    fk.start(grid)
    sampled = [h.clients for h in fk.history]
    assert set(loads) == {c for r in sampled for c in r}  # never the other 30-odd clients of the shard
    # two clients kept between rounds: a client sampled again is loaded again unless it was among them
    assert len(loads) >= sum(map(len, sampled)) - 2 * (len(sampled) - 1)
    assert_same_run(fk, in_process_run(s, threads=None))


def test_an_oversized_upload_in_a_reply_is_refused_for_its_client_only():
    """Each upload in a reply keeps its client's byte bound, checked before a tensor is built."""
    import numpy as np
    from flwr.app import Array

    s = Settings(num_clients=8, clients_per_round=4, rounds=1, seed=3)

    def bloat_first(node, message, reply):
        c = reply.content[pr.KEY]["clients"][0]
        reply.content[pr.cohort_key(c)] = ArrayRecord({"w": Array(np.zeros(1 << 22, dtype=np.float32))})

    fk = run_cohort(s, 1, tamper=bloat_first)
    rec = fk.history[0]
    first = rec.clients[0]
    assert [c for c, _ in rec.failed] == [first] and "exceeds the limit" in rec.failed[0][1]
    assert rec.contributed == rec.clients[1:]  # refused before it was read, as from a one-client node


class Crash:
    """A client whose update raises in ``round`` (its node trains the others)."""

    def __init__(self, inner, round: int) -> None:
        self.inner, self.round = inner, round

    def request(self, round: int, seed: int):
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int):
        if round == self.round:
            raise RuntimeError("boom")
        return self.inner.update(download, round, seed)


def test_a_client_that_crashes_on_its_node_fails_alone_as_in_process():
    from fedkernels.fl import Server

    # the sequential loop on both sides (a wrapped client keeps its round off the batched pass in process,
    # where it would keep only its own node's cohort off it here)
    s = Settings(num_clients=12, clients_per_round=6, rounds=2, seed=7)
    crash = 0
    app = cohort_client_app(
        lambda ctx: make_strategy(s),
        lambda ctx, c: shard(c, s),
        wrap=lambda ctx, c, e: Crash(e, 0) if c == crash else e,
    )
    run = next(RUNS)
    grid = MemoryGrid({1 + i: (app, Context(run, 1 + i, {"partition-id": i, "num-partitions": 2}, RecordDict(), {}))
                       for i in range(2)})  # fmt: skip
    cfg = dataclasses.replace(s.run_config(), client_timeout=None)
    fk = CohortFlowerStrategy(make_strategy(s), 16, 8, 12, cfg, startup_grace=0.0)
    fk.start(grid)
    clients = [shard(c, s) for c in range(12)]
    ref = Server(make_strategy(s), clients, 16, 8, cfg, client_wrapper=lambda c, e: Crash(e, 0) if c == crash else e)
    ref.run()
    assert crash in fk.history[0].clients  # sampled in round 0 with this seed
    assert fk.history[0].failed == [(crash, "crashed: RuntimeError: boom")] == ref.history[0].failed
    assert_same_run(fk, ref)
