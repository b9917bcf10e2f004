"""Strategy declares its optional hooks on the base class (with defaults), and no code finds them by name.

The hooks: ``predict_topk_client`` (a personalised model), ``embed`` (retrieval), ``diagnostics`` and
``hash_size`` (a hashed output layer). Callers call them; the base answers "none". A ``getattr`` or
``hasattr`` with a strategy attribute's name under src/ is the discovery this replaces, so the scan
below fails on one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from fedkernels.fl import ClientData, RunConfig, Server
from fedkernels.fl.algorithms import FedAvg
from fedkernels.fl.registry import make_strategy, strategies
from fedkernels.fl.strategy import Strategy
from python_tests.support.fl_data import one_label_clients

SRC = Path(__file__).resolve().parents[2] / "src" / "fedkernels"
NEEDS = {"l1diffnetwork": {"num_clients": 3}, "fedalc": {"client_secret": b"k" * 32}}
NEEDS["fedalc-fixed"] = NEEDS["fedalc"]


def strategy_attributes() -> set[str]:
    """Every public attribute of the base class and of each registered strategy built with its defaults."""
    names = {n for n in dir(Strategy) if not n.startswith("_")}
    for key in strategies():
        names |= {n for n in dir(make_strategy(key, **NEEDS.get(key, {}))) if not n.startswith("_")}
    return names


def named_lookups(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of every ``getattr(x, "name", ...)`` / ``hasattr(x, "name")`` with a literal name."""
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            out.append((node.lineno, node.args[1].value))
    return out


def test_no_module_discovers_a_strategy_hook_by_name():
    hooks = strategy_attributes()
    assert {"predict_topk_client", "embed", "diagnostics", "hash_size"} <= hooks
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for line, name in named_lookups(ast.parse(path.read_text(), str(path))):
            if name in hooks:
                found.append(f"{path.relative_to(SRC)}:{line} looks up {name!r}")
    assert not found, "declare the hook on Strategy (with a default) and call it:\n" + "\n".join(found)


def test_the_scan_sees_a_lookup():
    tree = ast.parse('f = getattr(strategy, "diagnostics", None)\nok = hasattr(s, "hash_size")\ng = getattr(o, n)')
    assert named_lookups(tree) == [(1, "diagnostics"), (2, "hash_size")]


def test_base_defaults_say_none():
    s = FedAvg(hidden=[4])
    state = s.init_state(6, 5, seed=0)
    x = torch.randn(3, 6)
    assert s.predict_topk_client(state, 0, x, 2) is None
    assert s.embed(state, x) is None
    assert s.diagnostics(state) == {}
    assert s.hash_size(5) is None


def test_overrides_answer():
    fedmlh = make_strategy("fedmlh", num_tables=2, num_buckets=16)
    assert fedmlh.hash_size(100) == (2, 16)
    net = make_strategy("l1diffnetwork", hidden=[4], num_clients=3)
    state = net.init_state(6, 5, seed=0)
    x = torch.randn(3, 6)
    got = net.predict_topk_client(state, 1, x, 2)
    assert got is not None and got.shape == (3, 2)
    fedss = make_strategy("fedss", hidden=[4], embed_dim=3)
    emb = fedss.embed(fedss.init_state(6, 5, seed=0), x)
    assert emb is not None and emb.shape == (3, 3)
    fedalc = make_strategy("fedalc", hidden=[4], dim=3, client_secret=b"k" * 32)
    assert fedalc.diagnostics(fedalc.init_state(6, 5, seed=0)) == {}  # no pair weights yet


class _Personal(FedAvg):
    """Client c's personal model ranks class ``(c + shift) % p`` first: P@1 is 1 for shift 0, else 0."""

    def __init__(self, shift: int) -> None:
        super().__init__(hidden=[4])
        self.shift = shift

    def predict_topk_client(self, state, client_id, x, k):
        p = state[sorted(state)[-1]].shape[0]
        first = torch.full((len(x), 1), (client_id + self.shift) % p, dtype=torch.int64)
        rest = torch.tensor([c for c in range(p) if c != first[0, 0]][: k - 1], dtype=torch.int64)
        return torch.cat([first, rest.expand(len(x), -1)], dim=1)


@pytest.mark.parametrize("shift,want", [(0, 1.0), (1, 0.0)])
def test_evaluate_clients_ranks_with_the_personal_model(shift, want):
    clients: list[ClientData] = one_label_clients(num_clients=4, per_client=5)
    server = Server(_Personal(shift), clients, clients[0].x.shape[1], clients[0].num_classes, RunConfig(rounds=0))
    assert server.evaluate_clients(clients, (1,))["P@1"] == want
