"""Privacy claims of sample-level DP-SGD, each tried as an auditor would try to break it.

Claim: with ``dp_sample_clip`` set, every example's gradient is clipped and noised in local training,
on every path a round can take (the sequential loop, the batched pass, private rounds, Flower).
"""

from __future__ import annotations

import math

import pytest
import torch

from fedkernels.fl import FedAvg, FedAwS, RunConfig, Server, TrainConfig
from fedkernels.fl.batched import train_batched
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
def test_the_batched_pass_never_trains_without_dp_sgd(strategy, clients, monkeypatch):
    """The review's case 1: ``batch_clients`` with ``dp_sample_clip`` trained with neither clipping nor
    noise. With a clip of 1e-9 and no noise, DP-SGD moves each client by at most lr * clip per step,
    so the global model barely moves; without DP-SGD the same round moves it by far more."""
    monkeypatch.setattr(
        "fedkernels.fl.batched.train_batched", lambda *a, **k: pytest.fail("the batched pass trained a DP-SGD round")
    )
    clip, lr, epochs = 1e-9, 0.5, 2

    def run(dp: bool) -> float:
        train = TrainConfig(epochs=epochs, batch_size=8, lr=lr, dp_sample_clip=clip if dp else None)
        cfg = RunConfig(rounds=1, clients_per_round=4, seed=3, train=train, batch_clients=True)
        s = Server(strategy(), clients(), 16, 8, cfg)
        before = {k: v.clone() for k, v in s.state.items()}
        if not dp:  # the plain round may take the batched pass
            monkeypatch.undo()
        s.run()
        return _moved(s.state, before)

    steps = epochs * math.ceil(40 / 8)
    # a Poisson batch can hold all n = 40 rows, where the step divides by the expected 8: at most 5x a step
    assert run(dp=True) <= lr * clip * steps * (40 / 8) + 1e-6  # + float32 rounding of the state
    assert run(dp=False) > 1e-3


def test_train_batched_refuses_dp_sgd():
    """The batched pass itself refuses a DP-SGD config rather than train without clipping and noise."""
    with pytest.raises(ValueError, match="no DP-SGD"):
        train_batched([], [], TrainConfig(dp_sample_clip=1.0))


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
