"""Privacy claims of sample-level DP-SGD, each tried as an auditor would try to break it.

Claim: with ``dp_sample_clip`` set, every example's gradient is clipped and noised in local training,
on every path a round can take (the sequential loop, the batched pass, private rounds, Flower).
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

import torch

from fedkernels.fl import FedAvg, FedAwS, PartialExchange, RunConfig, Server, TrainConfig, batched
from python_tests.support.fl_data import one_label_clients, tiny_clients


def _moved(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """How far the clients' averaged tensors moved (FedAwS's server also takes a spreadout step on ``W``
    of its own: left out)."""
    keys = [k for k in a if a[k].is_floating_point() and k != "W"]
    return math.sqrt(sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in keys))


@pytest.mark.parametrize(
    "strategy, clients",
    [(lambda: FedAvg(hidden=(8,)), lambda: tiny_clients(4)), (lambda: FedAwS(hidden=(8,), dim=4), one_label_clients)],
    ids=["fedavg", "fedaws"],
)
def test_the_batched_pass_clips_every_example(strategy, clients, monkeypatch):
    """The review's case 1: ``batch_clients`` with ``dp_sample_clip`` trained with neither clipping nor
    noise. Now a DP-SGD round takes DP-SGD's steps whatever path it takes (the in-process transport
    keeps such rounds on the sequential loop, which is faster on the CPU; ``train_batched`` itself takes
    them exactly, below): with a clip of 1e-9 and no noise each client moves by at most lr * clip *
    (n / batch) per step (a Poisson batch may hold all n rows, where the step divides by the expected
    batch), so the global model barely moves; without DP-SGD the same round moves it by far more."""
    calls = []
    real = batched.train_batched
    monkeypatch.setattr(batched, "train_batched", lambda *a, **k: calls.append(1) or real(*a, **k))
    clip, lr, epochs = 1e-9, 0.5, 2

    def run(dp: bool) -> float:
        train = TrainConfig(epochs=epochs, batch_size=8, lr=lr, dp_sample_clip=clip if dp else None)
        cfg = RunConfig(rounds=1, clients_per_round=4, seed=3, train=train, batch_clients=True)
        s = Server(strategy(), clients(), 16, 8, cfg)
        before = {k: v.clone() for k, v in s.state.items()}
        s.run()
        return _moved(s.state, before)

    steps = epochs * math.ceil(40 / 8)
    assert run(dp=True) <= lr * clip * steps * (40 / 8) + 1e-6  # + float32 rounding of the state
    assert calls == []  # the DP-SGD round took the sequential loop
    assert run(dp=False) > 1e-3
    assert calls == [1]  # the plain round took the batched pass


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize(
    "make, one_label",
    [
        (lambda: FedAvg(hidden=(8,)), False),
        (lambda: FedAwS(hidden=(8,), dim=4), True),
        (lambda: PartialExchange(fraction=0.5, hidden=(8,), keep_unreceived=False), False),
    ],
    ids=["fedavg", "fedaws", "partial"],
)
def test_batched_dp_sgd_equals_the_sequential_dp_sgd(make, one_label, optimizer):
    """A seeded simulation (same Poisson batches, same noise draws): each client's upload from the batched
    pass equals its own ``client_update`` with DP-SGD, for clients of different sizes, clipping that binds
    and noise, up to float rounding."""
    strategy = make()
    sizes = (3, 17, 40, 9)
    base = (one_label_clients if one_label else tiny_clients)(len(sizes), per_client=40)
    clients = [c.rows(torch.arange(n)) for c, n in zip(base, sizes, strict=True)]
    train = TrainConfig(
        epochs=2,
        batch_size=6,
        lr=0.05,
        optimizer=optimizer,
        dp_sample_clip=0.3,
        dp_sample_noise=0.7,
        dp_sample_seeded=True,
    )
    state = strategy.init_state(16, 8, 0)
    downloads = [
        strategy.client_payload(state, c, strategy.client_request(d, 0, 0) if one_label else None, 0, 0)
        for c, d in enumerate(clients)
    ]
    seeds = [11 + 7 * c for c in range(len(clients))]
    want = [strategy.client_update(p, d, train, 0, s) for p, d, s in zip(downloads, clients, seeds, strict=True)]
    problems = [strategy.local_problem(p, d, train, 0, s) for p, d, s in zip(downloads, clients, seeds, strict=True)]
    got = batched.train_batched(problems, clients, train)
    for w, g in zip(want, got, strict=True):
        assert list(w) == list(g)
        for name in w:
            torch.testing.assert_close(g[name], w[name], rtol=1e-4, atol=2e-5)


def _registered():
    from fedkernels.fl.registry import strategies

    return sorted(strategies())


@pytest.mark.parametrize("name", _registered())
def test_a_strategy_that_says_it_runs_dp_sgd_does_and_the_others_are_refused(name, monkeypatch):
    """Every strategy's declaration is checked against what its client_update does: where DP-SGD
    applies, training runs ``train_dp_sgd``; where it does not (L1Diff's full gradient, LabelPrior's
    counts, setup statistics outside the accountant), a DP-SGD run is refused before any round."""
    from fedkernels.fl.strategy import trains_with_dp_sgd
    from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, make_strategy

    strategy = make_strategy(name)
    clients = [client_data(i, 4, name) for i in range(4)]
    train = TrainConfig(epochs=1, batch_size=8, lr=0.1, dp_sample_clip=1.0, dp_sample_noise=1.0)
    cfg = RunConfig(rounds=1, clients_per_round=2, seed=1, train=train)
    from fedkernels.fl.round import has_setup_exchange

    if not trains_with_dp_sgd(strategy) or has_setup_exchange(strategy) or strategy.setup_needs_client_data():
        with pytest.raises(ValueError, match="DP"):
            Server(strategy, clients, NUM_FEATURES, NUM_CLASSES, cfg)
        return
    import fedkernels.fl.dpsgd as dpsgd

    calls = []
    real = dpsgd.train_dp_sgd
    monkeypatch.setattr(dpsgd, "train_dp_sgd", lambda *a, **k: calls.append(1) or real(*a, **k))
    s = Server(strategy, clients, NUM_FEATURES, NUM_CLASSES, cfg)
    rec = s.run_round()
    assert len(calls) == len(rec.contributed) >= 1
