"""The loop with partial weight exchange: round trips, byte accounting, reproducibility, aggregation."""

from __future__ import annotations

import math

import pytest
import torch

from fedkernels.fl import RunConfig, Server, TrainConfig, encode
from fedkernels.fl.algorithms import PartialExchange
from fedkernels.fl.client import ROUND_TAG
from python_tests.support.fl_data import assert_training_improves, tiny_clients


def _server(seed=0, rounds=3, fraction=0.5, **kw):
    cfg = RunConfig(rounds=rounds, clients_per_round=3, train=TrainConfig(epochs=1, batch_size=16, lr=0.3), seed=seed)
    return Server(PartialExchange(fraction=fraction, hidden=(8,), **kw), tiny_clients(4), 16, 8, cfg)


def _model(state):
    """The model tensors of a state (the server-only bookkeeping of keep_unreceived left out)."""
    return {k: v.clone() for k, v in state.items() if not k.startswith("server.")}


def test_round_trip_and_bytes():
    s = _server()
    state0 = _model(s.state)
    chosen = s.select_clients(0)
    ups = [s.run_client(c, 0)[0] for c in chosen]
    rec = s.run_round()  # the same round again through the server (pure functions of the seed)
    assert rec.clients == chosen and not rec.failed
    assert rec.bytes_down == len(chosen) * len(encode(state0))  # the whole model goes down the first time
    assert rec.bytes_up == sum(
        len(encode(u.payload, metadata={ROUND_TAG: "0"})) for u in ups
    )  # uploads name their round
    k = math.ceil(0.5 * 4)
    assert all(len(u.payload) == k for u in ups)  # 2 of the 4 tensors go up
    assert rec.bytes_up < len(chosen) * len(encode(state0))


@pytest.mark.parametrize("fraction, k", [(1e-6, 1), (0.25, 1), (0.3, 2), (1.0, 4)])
def test_upload_size_follows_fraction(fraction, k):
    s = _server(fraction=fraction)
    up, _ = s.run_client(0, 0)
    assert len(up.payload) == k and set(up.payload) <= set(_model(s.state))


def test_upload_holds_the_most_changed_tensors():
    s = _server()
    strategy, data = s.strategy, s.clients[0]
    payload = _model(s.state)
    sent = strategy.client_update(payload, data, s.config.train, 0, 7)
    # retrain with the same seed through FedAvg's update (same model, data, shuffle) to see all changes
    from fedkernels.fl.algorithms import FedAvg

    full = FedAvg.client_update(strategy, payload, data, s.config.train, 0, 7)
    change = {n: (full[n].double() - payload[n].double()).norm().item() for n in payload}
    top = sorted(change, key=lambda n: -change[n])[:2]
    assert sorted(sent) == sorted(top)
    assert all(torch.equal(sent[n], full[n]) for n in sent)


def _run(seed: int) -> tuple[dict[str, torch.Tensor], list[int]]:
    server = _server(seed=seed)
    server.run()
    return server.state, [rec.bytes_up for rec in server.history]


def test_same_seed_bit_identical():
    (state_a, up_a), (state_b, up_b), (state_c, _) = _run(3), _run(3), _run(4)
    assert state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    assert up_a == up_b  # the same tensors were selected every round
    assert any(not torch.equal(state_a[k], state_c[k]) for k in state_a)


def test_aggregation_matches_hand_computed():
    s = _server()
    chosen = s.select_clients(0)
    ups = [s.run_client(c, 0)[0] for c in chosen]
    new = s.strategy.aggregate(s.state, ups, 0)
    for name in _model(s.state):  # the server's bookkeeping: test_keep_unreceived_bookkeeping
        senders = [(float(len(s.clients[u.client_id])), u.payload[name]) for u in ups if name in u.payload]
        if senders:
            want = sum(w * x.double() for w, x in senders) / sum(w for w, _ in senders)
            torch.testing.assert_close(new[name].double(), want, rtol=1e-6, atol=1e-7)
        else:
            assert torch.equal(new[name], s.state[name])  # nobody sent it: kept


def test_aggregate_leaves_input_state():
    s = _server()
    before = {k: v.clone() for k, v in s.state.items()}
    ups = [s.run_client(c, 0)[0] for c in s.select_clients(0)]
    s.strategy.aggregate(s.state, ups, 0)
    assert all(torch.equal(before[k], s.state[k]) for k in before)


def test_full_fraction_trains():
    s = _server(rounds=25, fraction=1.0)
    assert_training_improves(s, 0.1)


def test_bad_fraction():
    with pytest.raises(ValueError, match="fraction"):
        PartialExchange(fraction=0.0)
    with pytest.raises(ValueError, match="fraction"):
        PartialExchange(fraction=1.5)


# ---- the authors' semantics (keep_unreceived): against a hand simulation of FL4Health's exchange


def _reference_run(rounds: int, fraction: float, how: str = "norm", threshold: float | None = None):
    """Server and client states of keep_unreceived partial exchange, simulated directly: the first
    download is the whole model, later ones the tensors aggregated in the previous round; a client
    trains its own model with the received tensors over it (FedAvg's local training), uploads the
    selected tensors (tests.reference.fl_ref.select) and keeps everything."""
    from fedkernels.fl.algorithms import FedAvg
    from fedkernels.fl.round import client_seed
    from python_tests.reference.fl_ref import select, weighted_mean

    s = _server(rounds=rounds, fraction=fraction, drift=how, threshold=threshold)
    strategy, train = s.strategy, s.config.train
    glob = _model(s.state)
    names = list(glob)
    fresh, synced, models, downs = set(names), set(), {}, []
    for r in range(rounds):
        uploads, down_bytes = [], 0
        for c in s.select_clients(r):
            download = {n: glob[n] for n in names if c not in synced or n in fresh}
            down_bytes += len(encode(download))
            view = {**models.get(c, {}), **download}
            trained = FedAvg.client_update(strategy, view, s.clients[c], train, r, client_seed(s.config.seed, r, c))
            uploads.append((c, {n: trained[n] for n in select(view, trained, fraction, how, threshold)}))
            models[c] = trained
        for n in names:
            senders = [(float(len(s.clients[c])), up[n]) for c, up in uploads if n in up]
            if senders:
                glob[n] = weighted_mean([t for _, t in senders], [w for w, _ in senders]).float()
        fresh = {n for _, up in uploads for n in up}
        synced |= {c for c, _ in uploads}
        downs.append(down_bytes)
    return s, glob, models, downs, fresh, synced


@pytest.mark.parametrize(
    "fraction, how, threshold", [(0.25, "norm", None), (0.5, "numel", None), (1.0, "rms", 0.05), (0.5, "norm", 1e9)]
)
def test_keep_unreceived_matches_the_hand_simulation(fraction, how, threshold):
    s, glob, models, downs, _, _ = _reference_run(3, fraction, how, threshold)
    s.run()
    for n, t in glob.items():
        torch.testing.assert_close(s.state[n], t, rtol=1e-5, atol=1e-6)
    for c, kept in models.items():  # each client holds its own trained model, unreceived tensors included
        mem = s.local_clients[c].memory
        assert mem is not None and all(torch.allclose(mem[n], kept[n], rtol=1e-5, atol=1e-6) for n in kept)
    assert [r.bytes_down for r in s.history] == downs  # later downloads hold only the fresh tensors
    if threshold == 1e9:  # nothing drifts that far: nothing goes up, and nothing comes down after round 0
        empty = [len(encode({}, metadata={ROUND_TAG: str(r.round)})) for r in s.history]  # uploads name their round
        assert all(r.bytes_up == n * len(r.clients) for r, n in zip(s.history, empty, strict=True))


def test_keep_unreceived_bookkeeping_and_personal_models():
    s = _server(rounds=2, fraction=0.25)
    s.run()
    fresh = s.state["server.fresh"]
    sent = {n for n in _model(s.state)}
    assert fresh.dtype == torch.uint8 and 1 <= int(fresh.sum()) < len(sent)  # p = 0.25: some tensors only
    assert s.state["server.synced"].tolist() == [int(c in {c for r in s.history for c in r.clients}) for c in range(4)]
    # two clients that trained differ on the tensors the server did not send back
    trained = [c for c in range(4) if s.local_clients[c].memory is not None]
    a, b = (s.local_clients[c].memory for c in trained[:2])
    stale = [n for n, f in zip(_model(s.state), fresh.tolist(), strict=True) if not f]
    assert any(not torch.equal(a[n], b[n]) for n in stale)
    held = tiny_clients(4, per_client=10, seed=7)
    got = s.evaluate_clients(held)
    assert set(got) >= {"P@1", "nDCG@1"} and 0.0 <= got["P@1"] <= 1.0


def test_old_semantics_send_the_whole_model():
    s = _server(rounds=2, keep_unreceived=False)
    full = len(encode(_model(s.state)))
    s.run()
    assert all(r.bytes_down == len(r.clients) * full for r in s.history)
    assert not any(n.startswith("server.") for n in s.state) and not s.strategy.stateful_clients


def test_stateful_clients_refuse_checkpoints(tmp_path):
    cfg = RunConfig(rounds=1, clients_per_round=2, checkpoint=str(tmp_path / "c.ckpt"))
    with pytest.raises(ValueError, match="stateful"):
        Server(PartialExchange(hidden=(8,)), tiny_clients(4), 16, 8, cfg)


def test_resmlp_has_52_tensors():
    from fedkernels.fl.algorithms import FedAvg

    s = PartialExchange(model="resmlp", hidden=(8,), blocks=12)
    state = s.init_state(16, 8, 0)
    assert len([n for n in state if not n.startswith("server.")]) == 52
    with pytest.raises(ValueError, match="resmlp"):
        FedAvg(model="resmlp", hidden=(8, 8))


@pytest.mark.parametrize("fraction, how", [(0.25, "numel"), (0.5, "norm")])
def test_clients_on_the_shared_test_set_match_the_hand_simulation(fraction, how):
    """The paper's evaluation: every client's model (its kept tensors with the fresh ones the server would
    send over them; the whole global model for a client that never trained) ranks the same test rows."""
    from python_tests.reference.fl_ref import clients_on_shared_test
    from python_tests.support.fl_data import tiny_dataset

    s, glob, models, _, fresh, synced = _reference_run(3, fraction, how)
    s.run()
    test = tiny_dataset(30, seed=99)
    views = [{**models[c], **{n: glob[n] for n in fresh}} if c in synced else dict(glob) for c in range(4)]
    with torch.no_grad():
        scores = [s.strategy._model({n: t.float() for n, t in v.items()})(test.x) for v in views]
    labels = [set(test.indices[test.indptr[i] : test.indptr[i + 1]].tolist()) for i in range(len(test))]
    for k in (1, 3):
        got = s.evaluate_clients_on(test, (k,), batch=7)  # several batches
        want = clients_on_shared_test(scores, labels, k)
        assert got[f"P@{k}"] == pytest.approx(want[f"P@{k}"], abs=1e-6)
        assert got[f"nDCG@{k}"] == pytest.approx(want[f"nDCG@{k}"], abs=1e-6)
