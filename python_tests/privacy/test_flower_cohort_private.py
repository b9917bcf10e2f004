"""Private rounds with cohort nodes (fedkernels.integrations.flower.cohort_private_server /
cohort_private_client), fast: the real CohortPrivateFlowerStrategy and cohort_client_app talk through
real Flower Messages over the in-memory grid. 12 clients on 4 nodes of 3; every client stays its own
SecAgg+ participant, each node gets one message per stage. Runs end bit-identical to the in-process
PrivateServer of the same seed (same sessions, survivors, bytes, epsilon); a node leaving after its
clients' masked upload drops all 3 and is recovered, too many leaving is refused with the state kept;
rounds whose colluding cohorts exceed the threat model's colluders are refused, and the secrets a
colluding node really holds rebuild no other client's mask key within the limit (they do beyond it)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")
pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

import torch
from flwr.app import Context, RecordDict

from fedkernels.fl import RunConfig, TrainConfig
from fedkernels.fl import payload as pl
from fedkernels.fl.privacy import DPConfig, PrivacyConfig, PrivateServer, crypto
from fedkernels.fl.privacy.secagg import SecAggClient, mask_key, neighbours_of
from fedkernels.fl.privacy.session import session_params
from fedkernels.integrations.flower import cohort_client_app
from fedkernels.integrations.flower import protocol as pr
from fedkernels.integrations.flower.cohort_private_client import FLOOR, state_key
from fedkernels.integrations.flower.cohort_private_server import CohortPrivateFlowerStrategy, collusion_refusal
from python_tests.support.flower_grid import MemoryGrid, task_identity
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, make_strategy

NUM_CLIENTS, NODES = 12, 4  # node i serves clients [3i, 3i + 3)
RUNS = iter(range(3000, 4000))
# 12 clients a round: T = 3 colluders (one node's cohort), k = 10, threshold 4, 2 planned dropouts
SECAGG = PrivacyConfig(secagg=True, corrupt_fraction=0.25)


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    task_identity(monkeypatch)


def config(rounds=1, per_round=NUM_CLIENTS, batch=False) -> RunConfig:
    return RunConfig(
        rounds=rounds,
        clients_per_round=per_round,
        seed=7,
        train=TrainConfig(epochs=1, batch_size=16, lr=0.3),
        batch_clients=batch,
    )


def grid(name: str, dp_noise_seed: int | None = None) -> MemoryGrid:
    app = cohort_client_app(
        lambda ctx: make_strategy(name), lambda ctx, c: client_data(c, NUM_CLIENTS, name), dp_noise_seed=dp_noise_seed
    )
    run = next(RUNS)
    config = {i: {"partition-id": i, "num-partitions": NODES} for i in range(NODES)}
    return MemoryGrid({10 + i: (app, Context(run, 10 + i, config[i], RecordDict(), {})) for i in range(NODES)})


def cohort_run(name, privacy, cfg, g, after_exchange=None, **kw) -> CohortPrivateFlowerStrategy:
    fk = CohortPrivateFlowerStrategy(
        make_strategy(name), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, cfg, privacy, after_exchange,
        startup_grace=0, **kw,
    )  # fmt: skip
    fk.start(g, timeout=5)
    return fk


def in_process(name, privacy, cfg, wrapper=None) -> PrivateServer:
    data = [client_data(c, NUM_CLIENTS, name) for c in range(NUM_CLIENTS)]
    s = PrivateServer(make_strategy(name), data, NUM_FEATURES, NUM_CLASSES, cfg, privacy, wrapper)
    s.run()
    return s


def records(run) -> list:
    return [(h.clients, [c for c, _ in h.failed], h.bytes_up, h.bytes_down, h.skipped, h.privacy) for h in run.history]


def same_state(a, b) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(("name", "batch"), [("fedavg", False), ("fedavg", True), ("fedss", False)])
def test_cohort_secagg_equals_in_process(name, batch):
    """12 of 12 clients (two rounds client by client, one batched, one FedSS with its private request
    union), SecAgg+ over
    cohort nodes: bit-identical to the in-process PrivateServer of the same seed (state, survivors,
    SecAgg+ bytes, failures), with batch_clients the train stage batched per node as in process. One
    message per node per stage, never one per client; each client's secrets under its own key."""
    cfg = config(rounds=2 if (name, batch) == ("fedavg", False) else 1, batch=batch)
    g = grid(name)
    fk = cohort_run(name, SECAGG, cfg, g)
    ref = in_process(name, SECAGG, cfg)
    assert all(h.failed == [] and not h.skipped for h in fk.history)
    assert same_state(fk.state, ref.state) and records(fk) == records(ref)
    private = [m for m in g.sent if m.metadata.message_type == pr.COHORT_PRIVATE]
    per_stage: dict[str, set[int]] = {}
    for m in private:
        per_stage.setdefault(f"{m.metadata.group_id}", set()).add(m.metadata.dst_node_id)
    assert all(len(nodes) <= NODES for nodes in per_stage.values())
    assert len(private) == sum(len(nodes) for nodes in per_stage.values())  # one message per node and stage
    assert fk.messages_sent[pr.COHORT_PRIVATE] == len(private)
    saved = {k for _, ctx in g.apps.values() for k in ctx.state.config_records}
    assert saved == {state_key(c) for c in fk.history[-1].clients} | {FLOOR}  # the last round's only


class DropAt:
    """The in-process twin of a node that leaves at one message kind of one round and stays away."""

    def __init__(self, inner, kind: str, round: int) -> None:
        self.inner, self.kind, self.round = inner, kind, round

    def handle(self, kind, round, seed, message):
        if (kind, round) == (self.kind, self.round) or round > self.round:
            raise ConnectionError("gone")
        return self.inner.handle(kind, round, seed, message)


def test_a_node_leaving_after_the_masked_upload_is_recovered_too_many_refused():
    """Round 0: node 13 (clients 9-11) leaves right after the masked-input stage: its 3 clients'
    inputs count (their self-masks rebuilt from the survivors' shares). Round 1: nodes 11, 12 and 13
    are gone after the masked stage, leaving clients 0-2 with fewer than threshold (4) answering
    neighbours: refused with the reason, the state unchanged. Bit-identical to the in-process twin
    whose clients leave at the same stages."""
    name, cfg = "fedavg", config(rounds=2)
    g = grid(name)
    leave = {0: [13], 1: [11, 12]}

    def after(kind: str, round: int) -> None:
        if kind == "upd/masked":
            g.offline.update(leave[round])

    fk = cohort_run(name, SECAGG, cfg, g, after)
    gone = {c: 0 for c in range(9, 12)} | {c: 1 for c in range(3, 9)}
    ref = in_process(name, SECAGG, cfg, lambda c, e: DropAt(e, "upd/unmask", gone[c]) if c in gone else e)
    h0, h1 = fk.history
    assert h0.failed == [] and h0.privacy["survivors"] == NUM_CLIENTS and not h0.skipped
    assert h1.skipped.startswith("secure aggregation (upd) failed: cannot unmask") and h1.privacy["survivors"] == 0
    # which client's shares fall short first depends on the session's random neighbour graph
    assert ref.history[1].skipped.startswith("secure aggregation (upd) failed: cannot unmask")
    short = [(*r[:4], r[4].split(": client")[0], r[5]) for r in records(fk)]
    assert same_state(fk.state, ref.state) and short == [
        (*r[:4], r[4].split(": client")[0], r[5]) for r in records(ref)
    ]


@pytest.mark.parametrize(("secagg", "batch"), [(False, False), (True, False), (False, True), (True, True)])
def test_cohort_dp_equals_in_process(secagg, batch):
    """Client-level DP, two rounds, Poisson sampling: central (the server clips and adds the seeded
    noise) and distributed (each client clips and adds its own seeded share under SecAgg+) over cohort
    nodes: the same sample, failures, bytes and epsilon every round as the in-process run. Client by
    client the state is bit-identical; with batch_clients a node batches its cohort, the in-process
    run the whole round, so the state agrees within the batched pass's float rounding (float32)."""
    dpc = DPConfig(0.5, noise=1.0, delta=0.3 if secagg else 1e-5)
    # Poisson rounds of 9-10 clients: T = 3 at corrupt_fraction 0.34 covers one node's cohort of 3
    priv = replace(SECAGG, secagg=secagg, dp=dpc, noise_seed=11, corrupt_fraction=0.34)
    cfg = config(rounds=2, per_round=10, batch=batch)
    fk = cohort_run("fedavg", priv, cfg, grid("fedavg", dp_noise_seed=11), colluding_nodes=1 if secagg else 0)
    ref = in_process("fedavg", priv, cfg)
    assert records(fk) == records(ref)
    if batch:
        assert all(torch.allclose(fk.state[k], v, atol=1e-6, rtol=0) for k, v in ref.state.items())
    else:
        assert same_state(fk.state, ref.state)
    eps = [h.privacy["epsilon"] for h in fk.history]
    assert eps == [h.privacy["epsilon"] for h in ref.history] and 0 < eps[0] < eps[1] < float("inf")
    assert all(h.privacy["survivors"] > 0 for h in fk.history)  # the noise was really released


def test_a_node_keeps_only_its_newest_rounds_client_states_and_refuses_older_rounds():
    """Central DP, 4 Poisson rounds of about 5 of 12 clients: a node keeps the private-round state of
    its clients of the last round it was sent (and its round floor), not of every client it ever
    served, and the run still equals the in-process one. A message of round 0 delivered again after
    the run is refused for every client it names: for a client whose state was dropped too (it starts
    at the node's floor), not only for one whose own state moved on."""
    priv = replace(SECAGG, secagg=False, dp=DPConfig(0.5, noise=1.0, delta=1e-5), noise_seed=11)
    cfg = config(rounds=4, per_round=5)
    g = grid("fedavg", dp_noise_seed=11)
    fk = cohort_run("fedavg", priv, cfg, g, colluding_nodes=0)
    assert records(fk) == records(in_process("fedavg", priv, cfg))
    ever = {c for h in fk.history for c in h.clients}
    for node, (_, ctx) in g.apps.items():
        kept = set(ctx.state.config_records)
        floor = ctx.state.config_records[FLOOR]["round"]
        last = [h for h in fk.history if any(3 * (node - 10) <= c < 3 * (node - 9) for c in h.clients)][-1]
        mine = {c for c in last.clients if 3 * (node - 10) <= c < 3 * (node - 9)}
        assert floor == fk.history.index(last) and kept == {FLOOR} | {state_key(c) for c in mine}
    assert len(ever) > len(fk.history[-1].clients)  # clients whose states were dropped exist
    private = [m for m in g.sent if m.metadata.message_type == pr.COHORT_PRIVATE]
    old = [m for m in private if m.content.config_records[pr.KEY]["round"] == 0]
    for m in old:
        app, ctx = g.apps[m.metadata.dst_node_id]
        head = app(m, ctx).content.config_records[pr.KEY]
        named = pr.int_list_field(m.content.config_records[pr.KEY], "clients")
        assert head["clients"] == [] and sorted(head["failed"]) == sorted(named)
        assert all("a message of round 0 after round" in r for r in head["failed-reasons"])


def test_rounds_whose_colluding_cohorts_exceed_the_threat_model_are_refused():
    """With 2 colluding nodes, 6 of 12 clients could collude, more than T = 3: every round is refused
    with the reason before any message, the state kept. With corrupt_fraction 0.1 (T = 1), one node of
    3 already exceeds it."""
    for priv, k in [(SECAGG, 2), (PrivacyConfig(secagg=True), 1)]:
        g = grid("fedavg")
        fk = cohort_run("fedavg", priv, config(), g, colluding_nodes=k)
        (h,) = fk.history
        assert h.skipped.startswith("cohort nodes: ") and "colluders SecAgg+ is built for" in h.skipped
        assert [c for c, _ in h.failed] == list(range(NUM_CLIENTS)) and h.bytes_down == h.bytes_up == 0
        assert not [m for m in g.sent if m.metadata.message_type == pr.COHORT_PRIVATE]
        assert same_state(fk.state, CohortPrivateFlowerStrategy(
            make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, config(), priv, colluding_nodes=k
        ).state)  # fmt: skip


def test_collusion_refusal_counts_the_largest_cohorts():
    assert collusion_refusal(SECAGG, 12, [3, 3, 3, 3], 1) == ""
    assert collusion_refusal(SECAGG, 12, [4, 3, 3, 2], 1) != ""
    assert collusion_refusal(SECAGG, 12, [1, 1, 1, 9], 0) == ""
    assert "7 of the round's 12 clients sit on the 2 largest" in collusion_refusal(SECAGG, 12, [2, 4, 1, 2, 3], 2)


def test_colluding_nodes_is_checked():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="colluding_nodes"):
            CohortPrivateFlowerStrategy(
                make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, config(), SECAGG, colluding_nodes=bad
            )


def _mask_key_shares(g: MemoryGrid, nodes: list[int]) -> tuple[dict[int, dict[int, bytes]], dict[int, bytes], object]:
    """What ``nodes`` hold after an ``upd`` session (their clients' saved states): honest client ->
    {holder index: its mask-key-seed share}, honest client -> its mask public key, and the session's
    parameters."""
    shares: dict[int, dict[int, bytes]] = {}
    public: dict[int, bytes] = {}
    params = None
    for node in nodes:
        ctx = g.apps[node][1]
        for key, rec in ctx.state.config_records.items():
            if key == FLOOR:
                continue
            saved = pl.decode(rec["state"])
            params, _ = session_params(
                {k[len("upd/advertise/") :]: t for k, t in saved.items() if k.startswith("upd/advertise/")}
            )
            sa = SecAggClient.restore(
                int(key.rsplit(".", 1)[1]),
                params,
                {k[len("upd/secagg/") :]: t for k, t in saved.items() if k.startswith("upd/secagg/")},
            )
            for u, (_, s_open) in sa.held.items():
                shares.setdefault(u, {})[neighbours_of(params, u).index(sa.id) + 1] = s_open[: crypto.SHARE_BYTES]
                public[u] = sa.peer_s_pk[u]
    return shares, public, params


def test_colluding_nodes_within_the_limit_cannot_rebuild_an_honest_clients_mask_key():
    """The attack the colluder check stops, run on the secrets the nodes really hold after a round.
    The server learns each summed client's self-mask seed at unmask (by design); what keeps one
    client's input hidden is its mask key (its pairwise masks with honest neighbours), shared
    threshold-of-k among its neighbours. Within the limit (one node of 3 clients colluding, T = 3,
    threshold 4) the colluders hold fewer than threshold shares of every other client's mask key:
    it cannot be rebuilt. Beyond it (two nodes, 6 clients: a configuration the check refuses, run here
    with colluding_nodes=0) the colluders rebuild an honest client's mask key from their shares."""
    g = grid("fedavg")
    fk = cohort_run("fedavg", SECAGG, config(), g)
    assert fk.history[0].privacy["survivors"] == NUM_CLIENTS
    shares, public, params = _mask_key_shares(g, [13])  # node 13: clients 9-11
    honest = list(range(9))
    held = [len(shares.get(u, {})) for u in honest]
    assert params.threshold == 4 and max(held) == 3  # as many as T allows, one short of the threshold
    for u in honest:
        with pytest.raises(crypto.CryptoError):
            crypto.combine_shares(shares.get(u, {}), params.threshold)

    g = grid("fedavg")
    cohort_run("fedavg", SECAGG, config(), g, colluding_nodes=0)
    shares, public, params = _mask_key_shares(g, [12, 13])  # clients 6-11
    rebuilt = [
        u
        for u in range(6)
        if len(shares.get(u, {})) >= params.threshold
        and crypto.public_key(mask_key(params, crypto.combine_shares(shares[u], params.threshold))) == public[u]
    ]
    assert rebuilt  # beyond the limit an honest client's pairwise masks are open to the coalition


def test_dp_sgd_under_secagg_asks_example_counts_per_node():
    """DP-SGD in local training under SecAgg+: the sample-level accountant's example counts come in
    one ``count`` message per node (each client answers its own), and the run, its sample-level
    epsilon included, equals the in-process run."""
    train = TrainConfig(epochs=1, batch_size=8, lr=0.1, dp_sample_clip=1.5, dp_sample_noise=1.1, dp_sample_seeded=True)
    cfg = replace(config(), train=train)
    g = grid("fedavg")
    fk = cohort_run("fedavg", SECAGG, cfg, g)
    ref = in_process("fedavg", SECAGG, cfg)
    assert same_state(fk.state, ref.state)
    # a Flower run's record keeps each contributor's example count too (the in-process run has the data)
    shown = [(*r[:5], {k: v for k, v in r[5].items() if not k.startswith("examples.")}) for r in records(fk)]
    assert shown == records(ref) and fk.history[0].privacy["sample_epsilon"] > 0
    assert [fk.history[0].privacy[f"examples.{c}"] for c in range(NUM_CLIENTS)] == [
        len(client_data(c, NUM_CLIENTS)) for c in range(NUM_CLIENTS)
    ]
    counts = [m for m in g.sent if m.metadata.group_id == "count-1"]
    assert len(counts) == NODES and len({m.metadata.dst_node_id for m in counts}) == NODES
