"""The Flower adapter's failure paths, fast and deterministic: the real FlowerStrategy and client_app,
with an in-memory grid that delivers messages to the client apps (or drops them, as a deadline would)."""

from __future__ import annotations

import pytest
import torch
from flwr.app import Array, ArrayRecord

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

from fedkernels.fl import Server
from fedkernels.fl import payload as pl
from fedkernels.fl.algorithms.fedaws import pair_weights_of
from fedkernels.fl.faults import FaultInjector
from fedkernels.integrations.flower import PAYLOAD, FlowerStrategy, client_app
from python_tests.support.flower_grid import MemoryGrid, context, task_identity
from python_tests.support.flower_runs import (
    NUM_CLASSES,
    NUM_FEATURES,
    client_data,
    held_out_data,
    make_strategy,
    run_config,
)
from python_tests.support.hardening import SilentWhereFaulty, SparseRowsAsking, same_state

NUM_CLIENTS = 4


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    task_identity(monkeypatch)


def grid(
    wrap=None, silent_clients=(), nodes=range(NUM_CLIENTS), strategy=lambda: make_strategy("fedavg")
) -> MemoryGrid:
    app = client_app(
        lambda ctx: strategy(), lambda ctx: client_data(int(ctx.node_config["partition-id"]), NUM_CLIENTS), wrap=wrap
    )
    apps = {1000 + c: (app, context(1000 + c, c)) for c in nodes}
    return MemoryGrid(apps, {1000 + c for c in silent_clients})


def flower(rounds=3, strategy=lambda: make_strategy("fedavg"), **kw) -> FlowerStrategy:
    cfg = run_config(rounds, 3, 9, **kw)
    return FlowerStrategy(strategy(), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, cfg, startup_grace=0)


def in_process(rounds=3, wrapper=None, strategy=lambda: make_strategy("fedavg")) -> Server:
    s = Server(
        strategy(),
        [client_data(c, NUM_CLIENTS) for c in range(NUM_CLIENTS)],
        NUM_FEATURES,
        NUM_CLASSES,
        run_config(rounds, 3, 9),
        client_wrapper=wrapper,
    )
    s.run()
    return s


def test_injected_faults_match_in_process():
    inj = FaultInjector(crash=0.3, empty=0.2, seed=5)
    fk = flower()
    fk.start(grid(wrap=lambda ctx, cid, inner: inj.wrap(cid, inner)), fk.initial_arrays(), num_rounds=3, timeout=5)
    ref = in_process(wrapper=inj)
    assert same_state(fk.state, ref.state)
    assert [[c for c, _ in h.failed] for h in fk.history] == [[c for c, _ in h.failed] for h in ref.history]
    assert any(h.failed for h in ref.history)
    reasons = {why.split(":")[0] for h in fk.history for _, why in h.failed}
    assert reasons <= {"crashed", "sent no upload"} and len(reasons) == 2


def test_silent_node_times_out_and_missing_node_fails():
    fk = flower(rounds=4, timeout=0.5)
    fk.start(grid(silent_clients=[2], nodes=[0, 1, 2]), fk.initial_arrays(), num_rounds=4, timeout=0.1)
    inj_like = {2: "timed out (no reply)", 3: "not connected"}
    failed = [(c, why) for h in fk.history for c, why in h.failed]
    assert failed and all(why == inj_like[c] for c, why in failed)
    # Same state as the in-process run where clients 2 and 3 send nothing.
    silent = FaultInjector(empty=1.0)
    ref = in_process(rounds=4, wrapper=lambda cid, inner: SilentWhereFaulty(silent, cid, inner) if cid >= 2 else inner)
    assert same_state(fk.state, ref.state)


def test_no_survivors_leaves_state():
    fk = flower(rounds=1)
    before = {k: v.clone() for k, v in fk.state.items()}
    fk.start(
        grid(wrap=lambda ctx, cid, inner: FaultInjector(crash=1.0).wrap(cid, inner)),
        fk.initial_arrays(),
        num_rounds=1,
        timeout=5,
    )
    assert len(fk.history[0].failed) == 3 and same_state(before, fk.state)


def test_setup_needing_clients_is_refused():
    class NeedsData(type(make_strategy("fedavg"))):
        def setup(self, clients, seed):
            self.sets = [c.indices for c in clients]

    with pytest.raises(NotImplementedError, match="setup"):
        FlowerStrategy(NeedsData(hidden=(8,)), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, run_config(1, 2, 0))
    with pytest.raises(ValueError, match="clients_per_round"):
        FlowerStrategy(make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, 2, run_config(1, 3, 0))


class BadAsk:
    """Asks for a class id out of range in round 1; honest otherwise."""

    def __init__(self, inner):
        self.inner = inner

    def request(self, round, seed):
        return pl.encode({"want": torch.tensor([0, 99])}) if round == 1 else self.inner.request(round, seed)

    def update(self, download, round, seed):
        return self.inner.update(download, round, seed)


def test_requests_match_in_process():
    """A strategy with a client_request (the FedSS shape): requests, downloads, uploads and a rejected
    request all go as in-process, to the same bits."""

    def wrap(cid, inner):
        return BadAsk(inner) if cid == 1 else inner

    fk = flower(strategy=SparseRowsAsking)
    fk.start(
        grid(wrap=lambda ctx, cid, inner: wrap(cid, inner), strategy=SparseRowsAsking),
        fk.initial_arrays(),
        num_rounds=3,
        timeout=5,
    )
    ref = in_process(wrapper=wrap, strategy=SparseRowsAsking)
    assert same_state(fk.state, ref.state)
    assert [h.failed for h in fk.history] == [h.failed for h in ref.history]
    assert [(h.bytes_up, h.bytes_down) for h in fk.history] == [(h.bytes_up, h.bytes_down) for h in ref.history]
    assert ref.history[1].failed == [(1, "rejected: tensor 'want' has values >= 8")]


def test_codec_bomb_is_rejected_and_the_round_completes():
    """An l1-difference client uploads a 39-byte stream claiming 600e6 elements for a bias of 8 (and
    in round 2 the audit's version-1 stream): aggregate_train records it as rejected, the round
    completes with the others, and the result is the in-process run's, to the bits."""
    from python_tests.fuzz.codec_streams import AUDIT_V1, v2
    from python_tests.support.hardening import Tampered, edit_tensors

    bombs = {
        0: v2(AUDIT_V1["audit_35B_bias_bomb"]),
        1: AUDIT_V1["audit_28B_shape_2pow33"],
        2: v2(AUDIT_V1["audit_36B_numel_2pow64"]),
    }

    class Bomber(Tampered):
        def update(self, download, round, seed):
            up = self.inner.update(download, round, seed)
            bomb = torch.frombuffer(bytearray(bombs[round % 3]), dtype=torch.uint8)
            return edit_tensors(lambda t: {**t, next(k for k in sorted(t) if k.endswith("bias")): bomb})(up)

    def wrap(cid, inner):
        return Bomber(cid, inner, None, {1}) if cid == 1 else inner

    def l1diff():
        return make_strategy("l1diff")

    fk = flower(strategy=l1diff)
    fk.start(
        grid(wrap=lambda ctx, cid, inner: wrap(cid, inner), strategy=l1diff),
        fk.initial_arrays(),
        num_rounds=3,
        timeout=5,
    )
    ref = in_process(wrapper=wrap, strategy=l1diff)
    assert same_state(fk.state, ref.state)
    assert [h.failed for h in fk.history] == [h.failed for h in ref.history]
    failed = [why for h in fk.history for c, why in h.failed]
    assert failed and all(
        why.startswith("rejected: tensor ") and "not a valid l1-difference stream: data " in why for why in failed
    ), failed
    assert all(h.round == r for r, h in enumerate(fk.history)) and len(fk.history) == 3


# ---- FedALC's setup exchange and federated evaluation over Flower messages ------------------------
def alc_grid(name: str, wrap=None, setup_hook=None) -> MemoryGrid:
    app = client_app(
        lambda ctx: make_strategy(name),
        lambda ctx: client_data(int(ctx.node_config["partition-id"]), NUM_CLIENTS, name),
        wrap=wrap,
        load_eval_data=lambda ctx: held_out_data(int(ctx.node_config["partition-id"]), NUM_CLIENTS, name),
    )
    apps = {1000 + c: (app, context(1000 + c, c)) for c in range(NUM_CLIENTS)}
    return MemoryGrid(apps)


def alc_in_process(name: str, rounds: int = 3) -> Server:
    s = Server(
        make_strategy(name),
        [client_data(c, NUM_CLIENTS, name) for c in range(NUM_CLIENTS)],
        NUM_FEATURES,
        NUM_CLASSES,
        run_config(rounds, 3, 9),
    )
    s.run(held_out=[held_out_data(c, NUM_CLIENTS, name) for c in range(NUM_CLIENTS)])
    return s


@pytest.mark.parametrize("name", ["fedalc", "fedalc-fixed"])
def test_fedalc_over_flower_matches_in_process(name):
    """FedALC's private label-set collection runs as Flower messages before round 1 (no
    NotImplementedError any more): the pair weights, every round and the final state equal the
    in-process run's, bit for bit; the label sets have real co-occurrences."""
    fk = FlowerStrategy(make_strategy(name), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, run_config(3, 3, 9))
    fk.start(alc_grid(name), fk.initial_arrays(), num_rounds=3, timeout=5)
    ref = alc_in_process(name)
    assert fk.setup_failed == {} and ref.setup_failed == {}
    got, want = pair_weights_of(fk.state), pair_weights_of(ref.state)
    assert torch.equal(got.indptr, want.indptr) and torch.equal(got.indices, want.indices)
    assert torch.equal(got.values, want.values) and bool((want.values < 1).any())  # co-occurrences seen
    assert same_state(fk.state, ref.state)
    assert [(h.clients, h.failed, h.bytes_up, h.bytes_down) for h in fk.history] == [
        (h.clients, h.failed, h.bytes_up, h.bytes_down) for h in ref.history
    ]


def test_bad_setup_report_is_left_out_not_fatal():
    """A client whose setup report is garbage is left out of the label sets (recorded), the others'
    reports make the pair weights, and the run goes on."""

    class GarbageReport:
        def __init__(self, app):
            self.app = app

        def __call__(self, message, ctx):
            out = self.app(message, ctx)
            if message.metadata.message_type.endswith("fedkernels_setup") and ctx.node_config["partition-id"] == 1:
                out.content[PAYLOAD] = ArrayRecord({"pairs": Array("uint8", (64,), "numpy.ndarray", b"\x07" * 64)})
            return out

    g = alc_grid("fedalc")
    g.apps = {n: (GarbageReport(app), ctx) for n, (app, ctx) in g.apps.items()}
    fk = FlowerStrategy(make_strategy("fedalc"), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, run_config(2, 3, 9))
    fk.start(g, fk.initial_arrays(), num_rounds=2, timeout=5)
    assert list(fk.setup_failed) == [1] and fk.setup_failed[1].startswith("rejected: ")
    assert len(fk.history) == 2 and pair_weights_of(fk.state) is not None


def reference_metrics(strategy, state, held_out, ks) -> dict[str, float]:
    """Slow reference: per client, per example, P@k, nDCG@k and R@k by hand; weighted by example counts."""
    import math

    sums = {f"{m}@{k}": 0.0 for k in ks for m in ("P", "nDCG", "R")}
    total = 0
    for data in held_out:
        for i in range(len(data)):
            top = strategy.predict_topk(state, data.x[i : i + 1], max(ks))[0].tolist()
            truth = set(data.indices[data.indptr[i] : data.indptr[i + 1]].tolist())
            for k in ks:
                hits = [1.0 if top[j] in truth else 0.0 for j in range(k)]
                sums[f"P@{k}"] += sum(hits) / k
                sums[f"R@{k}"] += sum(hits) / max(len(truth), 1)
                ideal = sum(1.0 / math.log2(j + 2) for j in range(min(k, len(truth))))
                dcg = sum(h / math.log2(j + 2) for j, h in enumerate(hits))
                sums[f"nDCG@{k}"] += dcg / ideal if ideal else 0.0
        total += len(data)
    return {n: v / total for n, v in sums.items()}


@pytest.mark.parametrize("name", ["fedavg", "fedalc"])
def test_federated_evaluation_matches_hand_weighted_reference(name):
    """Clients rank their own held-out data; the server weighs P@k/nDCG@k by examples. Flower and the
    in-process Server give the same numbers (the same protocol), equal to a slow per-example
    reference weighted by hand."""
    ks = (1, 3, 5)
    cfg = run_config(2, 3, 9)
    fk = FlowerStrategy(make_strategy(name), NUM_FEATURES, NUM_CLASSES, NUM_CLIENTS, cfg, federated_evaluation=True)
    fk.start(alc_grid(name), fk.initial_arrays(), num_rounds=2, timeout=5)
    ref = alc_in_process(name, rounds=2)
    assert same_state(fk.state, ref.state)
    for got, want in zip(fk.history, ref.history, strict=True):
        want_names = {f"fed-{m}@{k}" for k in ks for m in ("P", "nDCG", "R")}
        assert got.metrics == want.metrics and set(got.metrics) == want_names
    held = [held_out_data(c, NUM_CLIENTS, name) for c in range(NUM_CLIENTS)]
    slow = reference_metrics(ref.strategy, ref.state, held, ks)
    for n, v in slow.items():  # ranking_metrics averages in float32 on the client: float32 rounding
        assert fk.history[-1].metrics[f"fed-{n}"] == pytest.approx(v, rel=1e-6, abs=1e-9), n


def test_federated_evaluation_drops_bad_reports():
    """A report with a metric outside [0, 1] or a huge example count is left out, not averaged."""
    from fedkernels.fl import evaluation as ev

    ks = (1, 3)  # per k: P, nDCG, R
    good = pl.encode(
        {
            "metrics": torch.tensor([0.5, 0.5, 0.5, 0.25, 0.25, 0.75], dtype=torch.float64),
            "num_examples": torch.tensor([4]),
        }
    )
    liar = pl.encode(
        {"metrics": torch.tensor([7.0, 0, 0, 0, 0, 0], dtype=torch.float64), "num_examples": torch.tensor([4])}
    )
    heavy = pl.encode({"metrics": torch.ones(6, dtype=torch.float64), "num_examples": torch.tensor([2**50])})
    metrics, failed, n = ev.aggregate_evaluation({0: good, 1: liar, 2: heavy, 3: None}, ks)
    assert n == 4 and metrics == {"P@1": 0.5, "nDCG@1": 0.5, "R@1": 0.5, "P@3": 0.25, "nDCG@3": 0.25, "R@3": 0.75}
    assert sorted(failed) == [1, 2, 3] and failed[3] == "sent no evaluation"
