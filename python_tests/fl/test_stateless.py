"""Strategies hold only configuration (fedkernels.fl.strategy.Strategy): a run leaves the strategy
object exactly as it was built, so every per-run fact lives in the State (checkpointed, resumed) or
in what the round protocol records. Only memos of pure functions of the configuration, named in
``config_caches``, may fill up during a run."""

from __future__ import annotations

import copy

import pytest
import torch

from fedkernels.fl.registry import strategies
from python_tests.support.flower_runs import make_strategy
from python_tests.support.hardening import NUM_CLASSES, NUM_FEATURES, make_server

NAMES = sorted(strategies())


def _differences(a: object, b: object, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ (tensors by dtype, shape and value; containers recursively;
    other objects by their ``__dict__``, else by ``==``)."""
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} -> {type(b).__name__}"]
    if isinstance(a, torch.Tensor):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [f"{path}: tensor changed"]
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(map(str, a))} -> {sorted(map(str, b))}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{path}[{k!r}]")]
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} -> {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    if hasattr(a, "__dict__") and not isinstance(a, type):
        return _differences(vars(a), vars(b), f"{path}.")
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def _configuration(strategy) -> dict:
    """The strategy's attributes less its declared memos, deep-copied."""
    return copy.deepcopy({k: v for k, v in vars(strategy).items() if k not in type(strategy).config_caches})


@pytest.mark.parametrize("name", NAMES)
def test_a_run_leaves_the_strategy_unchanged(name, tmp_path):
    """Two rounds (with setup, checkpoints, centralised and federated evaluation) change nothing on
    the strategy object but its declared memos."""
    strategy = make_strategy(name)
    before = _configuration(strategy)
    # stateful clients (PartialExchange's keep_unreceived) refuse checkpoints, which cannot hold their memories
    ckpt = None if strategy.stateful_clients else str(tmp_path / "run.ckpt")
    server = make_server(strategy, rounds=2, checkpoint=ckpt)
    history = server.run(test=server.clients[0], held_out=server.clients)
    assert len(history) == 2 and history[-1].metrics
    assert _differences(before, _configuration(strategy)) == []
    # a second run on the same object ends where a fresh object's run does
    again = make_server(make_strategy(name), rounds=2)
    again.run()
    reused = make_server(strategy, rounds=2)
    reused.run()
    assert reused.state.keys() == again.state.keys()
    assert all(torch.equal(reused.state[k], again.state[k]) for k in again.state)


def test_the_comparison_sees_run_state():
    """The check above is not vacuous: an attribute set during a run (such as a cached ``_dims``) is caught."""
    strategy = make_strategy("fedavg")
    before = _configuration(strategy)
    strategy._dims = (NUM_FEATURES, NUM_CLASSES)
    assert _differences(before, _configuration(strategy))
    strategy = make_strategy("fedavg")
    before = _configuration(strategy)
    strategy.hidden = (*strategy.hidden, 1)
    assert _differences(before, _configuration(strategy))
