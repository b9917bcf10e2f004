"""Private rounds over Flower (fedkernels.integrations.flower.private_server / private_client), fast:
the real PrivateFlowerStrategy and client_app talk through real Flower Messages and ArrayRecords over
the in-memory grid, each message served as by a fresh ClientApp process (the per-process cache is
emptied before every message, so a client's SecAgg+ secrets must come back from its context.state).

Every algorithm that runs with secure aggregation in-process ends bit-identical to the in-process
PrivateServer and within the fixed-point error of the plain run; nodes that leave after uploading
their masked input are recovered up to t and refused beyond; central and distributed DP equal the
in-process run; DP-SGD's settings travel in the header. The loopback deployment with real SuperNodes
is in hardening/test_flower.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")
pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

import torch
from flwr.app import Context, RecordDict

from fedkernels.fl import RunConfig, Server, TrainConfig
from fedkernels.fl import payload as pl
from fedkernels.fl.privacy import DPConfig, PrivacyConfig, PrivateServer
from fedkernels.fl.registry import strategies
from fedkernels.integrations.flower import FlowerStrategy, client_app, flower_strategy_from
from fedkernels.integrations.flower import client as flower_client
from fedkernels.integrations.flower.app import run_config_from
from fedkernels.integrations.flower.private_client import STATE
from fedkernels.integrations.flower.private_server import PrivateFlowerStrategy, privacy_config_from
from python_tests.support.flower_grid import MemoryGrid, context, task_identity
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, held_out_data, make_strategy

NUM_CLIENTS = 5
# refused by the private path: personal heads (L1DiffNetwork), label counts (LabelPrior)
SECURE = sorted(n for n in strategies() if n not in ("l1diffnetwork", "labelprior"))


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    task_identity(monkeypatch)


def config(rounds=1, per_round=4, train=None) -> RunConfig:
    return RunConfig(
        rounds=rounds,
        clients_per_round=per_round,
        seed=7,
        train=train or TrainConfig(epochs=1, batch_size=16, lr=0.3),
        batch_clients=False,  # the client-by-client loop Flower runs: bit-identical twins
    )


def clients(name: str):
    return [client_data(c, NUM_CLIENTS, name) for c in range(NUM_CLIENTS)]


class FreshProcess:
    """A ClientApp served as Flower's deployment engine serves it: nothing in the process survives
    from one message to the next (the adapter's per-process node cache is emptied first)."""

    def __init__(self, app) -> None:
        self.app = app

    def __call__(self, message, ctx):
        flower_client._CACHE.nodes.clear()
        return self.app(message, ctx)


def grid(name: str, dp_noise_seed: int | None = None) -> MemoryGrid:
    app = client_app(
        lambda ctx: make_strategy(name),
        lambda ctx: client_data(int(ctx.node_config["partition-id"]), NUM_CLIENTS, name),
        load_eval_data=lambda ctx: held_out_data(int(ctx.node_config["partition-id"]), NUM_CLIENTS, name),
        dp_noise_seed=dp_noise_seed,
    )
    return MemoryGrid({1000 + c: (FreshProcess(app), context(1000 + c, c)) for c in range(NUM_CLIENTS)})


def over_flower(name, privacy, cfg, g, after_exchange=None, **flower) -> PrivateFlowerStrategy:
    fk = PrivateFlowerStrategy(
        make_strategy(name),
        NUM_FEATURES,
        NUM_CLASSES,
        NUM_CLIENTS,
        cfg,
        privacy,
        after_exchange,
        startup_grace=0,
        **flower,
    )
    fk.start(g, timeout=5)
    return fk


def in_process(name, privacy, cfg, wrapper=None) -> PrivateServer:
    s = PrivateServer(make_strategy(name), clients(name), NUM_FEATURES, NUM_CLASSES, cfg, privacy, wrapper)
    s.run()
    return s


def records(run) -> list:
    return [(h.clients, [c for c, _ in h.failed], h.bytes_up, h.bytes_down, h.skipped, h.privacy) for h in run.history]


def same_state(a, b) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", SECURE)
def test_secagg_over_flower_equals_in_process_and_the_plain_run(name):
    """One round, 4 of 5 clients, SecAgg+ over Flower messages: bit-identical to the in-process
    PrivateServer (same sessions, bytes, survivors, row sets), and within the fixed-point error of
    the plain Server (32-bit ring at bound 4: a step of 2^-26 for 4 clients) plus float32 rounding.
    Each node's round secrets were kept in its context.state."""
    priv, g = PrivacyConfig(secagg=True), grid(name)
    fk = over_flower(name, priv, config(), g)
    ref = in_process(name, priv, config())
    assert [h.failed for h in fk.history] == [[]] and fk.history[0].privacy["survivors"] == 4
    assert same_state(fk.state, ref.state) and records(fk) == records(ref)
    plain = Server(make_strategy(name), clients(name), NUM_FEATURES, NUM_CLASSES, config())
    plain.run()
    for k, v in plain.state.items():
        assert torch.allclose(fk.state[k].double(), v.double(), atol=2e-5, rtol=0), (name, k)
    kept = [
        isinstance(ctx.state.config_records[STATE]["state"], bytes)
        for _, ctx in g.apps.values()
        if STATE in ctx.state.config_records
    ]
    assert len(kept) == 4 and all(kept)


class DropAt:
    """The in-process twin of a node that leaves at one message kind of one round and stays away."""

    def __init__(self, inner, kind: str, round: int) -> None:
        self.inner, self.kind, self.round = inner, kind, round

    def handle(self, kind, round, seed, message):
        if (kind, round) == (self.kind, self.round) or round > self.round:
            raise ConnectionError("gone")
        return self.inner.handle(kind, round, seed, message)


def test_nodes_leaving_after_their_masked_upload_recovered_up_to_t_refused_beyond():
    """All 5 clients a round. Round 0 (5 participants: k = 4, threshold 2): client 4's node leaves
    right after the masked-input stage; its vector counts (its self-mask seed is rebuilt from its
    neighbours' shares: it is summed, not failed), and the state equals the plain run of all 5 within
    the fixed-point error. Round 1 (4 participants: k = 3, threshold 2): clients 2 and 3 leave after
    their masked upload, leaving clients 0 and 1 one answering holder each: the round is refused with
    the reason, the state unchanged. Bit-identical to the in-process twin throughout."""
    name, cfg, priv = "fedavg", config(rounds=2, per_round=5), PrivacyConfig(secagg=True)
    g = grid(name)
    leave = {0: [4], 1: [2, 3]}

    def after(kind: str, round: int) -> None:
        if kind == "upd/masked":
            g.offline.update(1000 + c for c in leave[round])

    fk = over_flower(name, priv, cfg, g, after)
    gone = {4: 0, 2: 1, 3: 1}
    ref = in_process(name, priv, cfg, lambda c, e: DropAt(e, "upd/unmask", gone[c]) if c in gone else e)
    h0, h1 = fk.history
    assert h0.failed == [] and h0.privacy["survivors"] == 5 and not h0.skipped
    assert h1.skipped.startswith("secure aggregation (upd) failed: cannot unmask") and h1.privacy["survivors"] == 0
    assert [c for c, _ in h1.failed] == [2, 3, 4]
    assert same_state(fk.state, ref.state) and records(fk) == records(ref)
    plain = Server(make_strategy(name), clients(name), NUM_FEATURES, NUM_CLASSES, config(rounds=1, per_round=5))
    plain.run()
    assert all(torch.allclose(fk.state[k], v, atol=2e-5, rtol=0) for k, v in plain.state.items())


@pytest.mark.parametrize("secagg", [False, True])
def test_dp_over_flower_equals_in_process(secagg):
    """Client-level DP, two rounds, Poisson sampling at q = 0.8: central (the server clips and adds
    the noise, seeded) and distributed (each client clips and adds its seeded share under SecAgg+)
    end bit-identical to the in-process run, with the same epsilon every round. (Distributed DP at 5
    clients: a round too small for SecAgg+ has probability ~0.03, which spends delta: a wide delta.)"""
    priv = PrivacyConfig(secagg=secagg, dp=DPConfig(0.5, noise=1.0, delta=0.3 if secagg else 1e-5), noise_seed=11)
    cfg = config(rounds=2, per_round=4)
    fk = over_flower("fedavg", priv, cfg, grid("fedavg", dp_noise_seed=11))
    ref = in_process("fedavg", priv, cfg)
    assert same_state(fk.state, ref.state) and records(fk) == records(ref)
    eps = [h.privacy["epsilon"] for h in fk.history]
    assert 0 < eps[0] < eps[1] < float("inf")
    noiseless = in_process("fedavg", PrivacyConfig(secagg=secagg, dp=replace(priv.dp, noise=0.0)), cfg)
    assert not same_state(fk.state, noiseless.state)  # the noise was really added


def test_dp_sgd_settings_travel_in_the_header():
    """DP-SGD's clip, noise multiplier and seeding are header fields like the other local-training
    settings: a plain Flower run with per-example clipping equals the in-process run with the same
    TrainConfig (a seeded simulation: by default each device draws its batches from OS randomness) and
    differs from the unclipped one; the node reads back exactly what the server set."""
    train = TrainConfig(
        epochs=1, batch_size=16, lr=0.3, dp_sample_clip=0.05, dp_sample_noise=0.0, dp_sample_seeded=True
    )
    fk = FlowerStrategy(make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, config(train=train))
    fk.start(grid("fedavg"), timeout=5)
    ref = Server(make_strategy("fedavg"), clients("fedavg"), NUM_FEATURES, NUM_CLASSES, config(train=train))
    ref.run()
    plain = Server(make_strategy("fedavg"), clients("fedavg"), NUM_FEATURES, NUM_CLASSES, config())
    plain.run()
    assert same_state(fk.state, ref.state) and not same_state(ref.state, plain.state)
    noisy = TrainConfig(epochs=2, batch_size=8, lr=0.1, dp_sample_clip=1.5, dp_sample_noise=1.1, dp_sample_seeded=True)
    fk = FlowerStrategy(make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, config(train=noisy))
    assert flower_client.train_config(fk._header(0, 1, 5)) == noisy
    fk.config.train = TrainConfig()
    assert flower_client.train_config(fk._header(0, 1, 5)).dp_sample_clip is None
    bad = fk._header(0, 1, 5)
    bad["dp-sample-noise"] = -1.0
    with pytest.raises(pl.PayloadError, match="dp-sample"):
        flower_client.train_config(bad)


def run_context(**config) -> Context:
    return Context(1, 0, {}, RecordDict(), {"num-clients": NUM_CLIENTS, "rounds": 3, **config})


def test_privacy_settings_from_run_config():
    assert privacy_config_from(run_context(secagg=False, **{"dp-clip": 0.0})) is None
    got = privacy_config_from(
        run_context(secagg=True, **{"dp-clip": 0.5, "target-epsilon": 4.0, "secagg-dropouts": 1, "secagg-degree": 0})
    )
    assert got == PrivacyConfig(secagg=True, max_dropouts=1, dp=DPConfig(0.5, target_epsilon=4.0))
    assert privacy_config_from(run_context(secagg=True, **{"l1diff-segments": 5})) == PrivacyConfig(
        secagg=True, l1diff_segments=5
    )
    ctx = run_context(secagg=True, **{"dp-clip": 0.5, "dp-noise": 1.2, "dp-delta": 0.3})
    fk = flower_strategy_from(ctx, make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES)
    assert isinstance(fk, PrivateFlowerStrategy) and fk.sigma == 1.2 and fk.q == 4 / NUM_CLIENTS
    assert type(flower_strategy_from(run_context(), make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES)) is (
        FlowerStrategy
    )
    nan = float("nan")
    for bad, match in [
        ({"dp-noise": 1.0}, "need dp-clip"),
        ({"dp-clip": 1.0, "dp-noise": 1.0, "target-epsilon": 2.0}, "exactly one of dp-noise"),
        ({"secagg": True, "secagg-bits": 80}, "secagg-bits"),
        ({"secagg": True, "l1diff-segments": -1}, "l1diff-segments"),
        # the review's case 6: each of these ran with privacy off or zero noise
        ({"dp-clip": nan, "dp-noise": 1.0}, "dp-clip must be a finite number"),
        ({"dp-clip": 1.0, "target-epsilon": -3.0}, "target-epsilon must be a finite number"),
        ({"dp-clip": 1.0, "target-epsilon": nan}, "target-epsilon must be a finite number"),
        ({"dp-clip": 1.0}, "exactly one of dp-noise"),
        ({"dp-clip": 1.0, "dp-noise": -1.0}, "dp-noise must be a finite number"),
        ({"dp-clip": 1.0, "dp-noise": float("inf")}, "dp-noise must be a finite number"),
        ({"embedding-dp-clip": nan}, "embedding"),
        ({"dp-clip": 1.0, "dp-noise": 1.0, "dp-delta": nan}, "dp-delta"),
        ({"secagg": "yes"}, "secagg must be true or false"),
        # issue 41 item 14: settings no graph makes secure and correct for the round's clients
        ({"secagg": True, "secagg-degree": 3, "clients-per-round": 10}, "degree must be even"),
        ({"secagg": True, "secagg-dropouts": 50, "clients-per-round": 10}, "max_dropouts 50"),
        ({"secagg": True, "secagg-corrupt-fraction": 0.5, "clients-per-round": 10}, "no SecAgg\\+ graph"),
        ({"secagg": True, "secagg-dropout-fraction": 1.5}, "secagg-dropout-fraction must be a finite number"),
    ]:
        with pytest.raises(ValueError, match=match):
            privacy_config_from(run_context(**bad))
        with pytest.raises(ValueError, match=match):  # the app's entry point refuses it too
            flower_strategy_from(run_context(**bad), make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES)


def test_dp_sgd_settings_from_run_config_are_checked_as_the_cli_checks_them():
    for bad, match in [
        ({"dp-sample-clip": float("nan")}, "dp-sample-clip must be a finite number"),
        ({"dp-sample-clip": -1.0}, "dp-sample-clip must be a finite number"),
        ({"dp-sample-noise": 1.0}, "dp-sample-noise needs dp-sample-clip"),
        ({"dp-sample-clip": 1.0, "dp-sample-noise": float("inf")}, "dp-sample-noise must be a finite number"),
    ]:
        with pytest.raises(ValueError, match=match):
            run_config_from(run_context(**bad))
    got = run_config_from(run_context(**{"dp-sample-clip": 0.5, "dp-sample-noise": 1.1})).train
    assert (got.dp_sample_clip, got.dp_sample_noise) == (0.5, 1.1)
    assert run_config_from(run_context(**{"dp-sample-clip": 0.0})).train.dp_sample_clip is None


def test_l1diff_public_segments_over_flower_equal_in_process():
    """L1Diff's public-segmentation variant (a dense round, then K - 1 = 2 segmented, then dense):
    the segment lengths travel in the download and the nodes need no setting of their own, so
    three rounds over Flower end bit-identical to the in-process run, bytes included."""
    priv = PrivacyConfig(secagg=True, l1diff_segments=3)
    fk = over_flower("l1diff", priv, config(rounds=4), grid("l1diff"))
    ref = in_process("l1diff", priv, config(rounds=4))
    assert [h.failed for h in fk.history] == [[]] * 4
    assert same_state(fk.state, ref.state) and records(fk) == records(ref)
    ups = [h.privacy["secagg_bytes_up"] for h in fk.history]
    assert ups[1] < ups[0] and ups[2] < ups[0] and ups[3] > ups[1]


def test_federated_evaluation_under_secagg_over_flower_equals_in_process():
    """Issue 41 item 15: with secure aggregation the federated evaluation's reports are summed by an
    ``evl`` SecAgg+ session over Flower too (no report in the clear): the fed- metrics equal the
    in-process run's bit for bit, and the plain example-weighted means within the fixed point."""
    name, priv = "fedavg", PrivacyConfig(secagg=True)
    cfg = config(rounds=1)
    fk = over_flower(name, priv, cfg, grid(name), federated_evaluation=True)
    held = [held_out_data(c, NUM_CLIENTS, name) for c in range(NUM_CLIENTS)]
    ref = PrivateServer(make_strategy(name), clients(name), NUM_FEATURES, NUM_CLASSES, cfg, priv)
    ref.run(held_out=held)
    got = {k: v for k, v in fk.history[0].metrics.items() if k.startswith("fed-")}
    assert got and got == {k: v for k, v in ref.history[0].metrics.items() if k.startswith("fed-")}
    plain, _ = Server.evaluate_federated(ref, held, round=0)
    assert all(abs(got[f"fed-{k}"] - v) < 1e-6 for k, v in plain.items())
