"""Private rounds whose local training takes the batched pass (``RunConfig.batch_clients``).

Only local training is batched (:func:`fedkernels.fl.privacy.client.train_together`): each client's
contribution, weight, clip and DP noise share stay its own, drawn from its own generator. Checked
client by client (each client's vector equals the one it makes alone: a shared or reordered noise
stream would move it by the noise's size) and run by run (a batched private run ends where the
sequential private run ends), with the fallbacks that keep the sequential loop.

Tolerances: the batched pass equals the sequential loop up to float32 rounding of another summation
order (``FP32``, relative to a tensor's largest magnitude); a run's state also passes SecAgg+'s fixed
point encoding (a step of 2^-26 at bound 4), so it may differ by a few such steps (``RUN_ATOL``, as in
test_loop.py).
"""

from __future__ import annotations

import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

import dataclasses

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedkernels.fl import TrainConfig, batched
from fedkernels.fl.privacy import DPConfig, PrivacyConfig
from fedkernels.fl.privacy.client import TRAIN, PrivateClient, train_together
from python_tests.support.private_runs import config, private_server

FP32 = 1e-4
RUN_ATOL = 2e-5
BATCHED = ("fedavg", "fedaws", "partialexchange")  # strategies with a batched form and a private form


class _Recorder:
    """A client endpoint that keeps the train messages it answers (and answers them itself)."""

    def __init__(self, inner: PrivateClient, log: dict) -> None:
        self.inner, self.log = inner, log

    def handle(self, kind, round, seed, message):
        if kind == TRAIN:
            self.log[self.inner.id] = (round, seed, message)
        return self.inner.handle(kind, round, seed, message)


def _spy(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = batched.train_batched
    monkeypatch.setattr(batched, "train_batched", lambda p, *a, **k: calls.append(len(p)) or real(p, *a, **k))
    return calls


def _vectors_alone_and_together(name: str, privacy: PrivacyConfig, seed: int) -> tuple[dict, dict]:
    """One round's train messages answered client by client (the recorded sequential round) and again
    by fresh clients in one batched pass: each client's contribution vector, both ways."""
    log: dict = {}
    cfg = config(1, per_round=5, seed=seed)  # every client: distributed DP needs a sample that carries the noise
    alone = private_server(name, privacy, cfg, wrapper=lambda c, e: _Recorder(e, log))
    alone.run_round()
    assert len(log) >= 2
    fresh = [
        PrivateClient(c, alone.strategy, alone.form, alone.clients[c], alone.config.train, privacy.noise_seed)
        for c in sorted(log)
    ]
    (round, *_), seeds = next(iter(log.values())), {c: log[c][1] for c in log}
    replies = train_together(fresh, round, seeds, {c: log[c][2] for c in sorted(log)})
    assert replies is not None
    return {c: alone.private_clients[c]._vector for c in log}, {f.id: f._vector for f in fresh}


@pytest.mark.parametrize("name", BATCHED)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), noise_seed=st.integers(0, 2**16), clip=st.sampled_from([0.05, 0.5, 50.0]))
def test_each_clients_clipped_noised_vector_is_its_own(name, seed, noise_seed, clip):
    """Distributed DP under SecAgg+: every client clips its contribution and adds its noise share from
    its own generator. The batched pass gives each client the vector it makes alone (clipping that binds
    or not), while the noise (std ~ sigma clip) dwarfs the tolerance, so a shared stream would fail."""
    privacy = PrivacyConfig(secagg=True, dp=DPConfig(clip, noise=1.0), noise_seed=noise_seed)
    alone, together = _vectors_alone_and_together(name, privacy, seed)
    assert sorted(alone) == sorted(together)
    for c, want in alone.items():
        scale = float(want.abs().max())
        assert float((together[c] - want).abs().max()) <= FP32 * scale, c
    vecs = list(alone.values())
    assert not torch.allclose(vecs[0], vecs[1])  # the clients' vectors differ (their own noise, their own data)


@pytest.mark.parametrize("name", BATCHED)
def test_secure_aggregation_without_dp_vectors_match(name):
    """SecAgg+ alone: each client weighs its update by its own example count (which never leaves it)."""
    alone, together = _vectors_alone_and_together(name, PrivacyConfig(secagg=True), 3)
    for c, want in alone.items():
        assert float((together[c] - want).abs().max()) <= FP32 * float(want.abs().max()), c


def _run(name: str, privacy: PrivacyConfig, batch: bool, rounds: int = 2, **train):
    cfg = config(rounds, per_round=5 if privacy.dp is not None else 4)
    cfg = dataclasses.replace(cfg, batch_clients=batch, train=dataclasses.replace(cfg.train, **train))
    s = private_server(name, privacy, cfg)
    s.run()
    return s


PRIVACY = {
    "secagg": PrivacyConfig(secagg=True),
    "central-dp": PrivacyConfig(dp=DPConfig(0.5, noise=0.8), noise_seed=11),
    "distributed-dp": PrivacyConfig(secagg=True, dp=DPConfig(0.5, noise=0.8), noise_seed=11),
}


@pytest.mark.parametrize("privacy", list(PRIVACY))
@pytest.mark.parametrize("name", BATCHED)
def test_batched_private_run_equals_the_sequential_private_run(name, privacy, monkeypatch):
    calls = _spy(monkeypatch)
    fast = _run(name, PRIVACY[privacy], True)
    taken = list(calls)
    slow = _run(name, PRIVACY[privacy], False)
    assert taken and len(taken) == len(fast.history)  # every round's training took the batched pass ...
    assert calls == taken  # ... and the sequential run never did
    assert [len(r.clients) for r in fast.history] == taken  # with all of the round's clients at once
    assert [(r.clients, r.failed, r.skipped) for r in fast.history] == [
        (r.clients, r.failed, r.skipped) for r in slow.history
    ]
    assert [r.privacy.get("epsilon") for r in fast.history] == [r.privacy.get("epsilon") for r in slow.history]
    for k, v in slow.state.items():
        assert torch.allclose(fast.state[k].double(), v.double(), atol=RUN_ATOL, rtol=FP32), k


class _Drop:
    def __init__(self, inner) -> None:
        self.inner = inner

    def handle(self, kind, round, seed, message):
        return self.inner.handle(kind, round, seed, message)


@pytest.mark.parametrize(
    "why, kw",
    [
        ("a wrapped endpoint answers itself", {"wrapper": lambda c, e: _Drop(e)}),
        ("a deadline", {"timeout": 60.0}),
        ("DP-SGD on the host", {"dp_sgd": True}),
        ("batching off", {"batch": False}),
    ],
)
def test_fallbacks_keep_the_sequential_loop(why, kw, monkeypatch):
    monkeypatch.setattr(batched, "train_batched", lambda *a, **k: pytest.fail(f"batched despite {why}"))
    cfg = dataclasses.replace(config(1), batch_clients=kw.get("batch", True), client_timeout=kw.get("timeout"))
    if kw.get("dp_sgd"):
        cfg = dataclasses.replace(
            cfg, train=TrainConfig(epochs=1, batch_size=16, lr=0.3, dp_sample_clip=1.0, dp_sample_noise=1.0)
        )
    s = private_server("fedavg", PrivacyConfig(secagg=True), cfg, wrapper=kw.get("wrapper"))
    rec = s.run_round()
    assert not rec.failed and not rec.skipped


def test_a_client_that_already_trained_this_round_is_left_to_refuse_on_its_own():
    """A second train message in a round: the batched pass steps aside, so the client's own refusal
    (one train per round) is what the server sees."""
    log: dict = {}
    s = private_server("fedavg", PrivacyConfig(secagg=True), wrapper=lambda c, e: _Recorder(e, log))
    s.run_round()
    clients = [s.private_clients[c] for c in sorted(log)]
    round, seeds = next(iter(log.values()))[0], {c: log[c][1] for c in log}
    assert train_together(clients, round, seeds, {c: log[c][2] for c in sorted(log)}) is None


def test_private_clients_train_on_the_run_device_and_dp_sgd_batches_off_the_host(monkeypatch):
    """The private clients get the run's device; DP-SGD rounds take the pass there (not on the host,
    where the loop's per-example backward passes cost less). No GPU here: the server's device is set
    after it is built, and the pass is stopped where it starts."""
    from fedkernels.fl.privacy import server as private_server_module

    started = []
    monkeypatch.setattr(private_server_module, "train_together", lambda ends, *a: started.append(len(ends)))
    train = TrainConfig(epochs=1, batch_size=16, lr=0.3, dp_sample_clip=1.0, dp_sample_noise=1.0)
    cfg = dataclasses.replace(config(1), batch_clients=True, train=train)
    s = private_server("fedavg", PrivacyConfig(secagg=True), cfg)
    assert all(c.device == s.device == torch.device("cpu") for c in s.private_clients)
    messages = {0: b"", 1: b""}
    assert s._train_batched(0, messages) is None and started == []  # on the host: one by one
    s.device = torch.device("cuda")
    s._train_batched(0, messages)
    assert started == [2]


def test_train_together_moves_the_clients_data_and_downloads_to_their_device():
    """The batched pass gets each client's data and download on the clients' device (here ``meta``,
    stopped at the first problem: meta tensors have no values); clients on two devices answer alone."""
    log: dict = {}
    s = private_server("fedavg", PrivacyConfig(secagg=True), wrapper=lambda c, e: _Recorder(e, log))
    s.run_round()
    seen = []

    def stop(down, data, config, round, seed):
        seen.append({data.x.device.type, *(t.device.type for t in down.values())})
        raise StopIteration

    strategy = s.strategy
    strategy.local_problem = stop  # type: ignore[method-assign]
    ids = sorted(log)
    round, seeds, messages = log[ids[0]][0], {c: log[c][1] for c in ids}, {c: log[c][2] for c in ids}

    def fresh(device):
        return [PrivateClient(c, strategy, s.form, s.clients[c], s.config.train, device=device) for c in ids]

    with pytest.raises(StopIteration):
        train_together(fresh("meta"), round, seeds, messages)
    assert seen == [{"meta"}]
    mixed = fresh("cpu")
    mixed[0].device = torch.device("meta")
    assert train_together(mixed, round, seeds, messages) is None
