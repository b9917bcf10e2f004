"""A run is described once: ``ExperimentConfig.run_config`` is the one place under src/ that builds the
federated loop's ``RunConfig``; the Flower app and the Flower simulation describe their run as an
``ExperimentConfig`` first and call it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

from fedkernels.experiments.experiment import ExperimentConfig
from fedkernels.fl import RunConfig, TrainConfig
from fedkernels.integrations.flower import run_config_from
from fedkernels.testing.flower_sim import Settings

SRC = Path(__file__).resolve().parents[2] / "src" / "fedkernels"
BUILDER = ("experiments/configuration.py", "ExperimentConfig.run_config")


def calls_of(tree: ast.AST, name: str) -> list[tuple[int, str]]:
    """``(line, enclosing Class.function)`` of every call of ``name(...)`` in ``tree``."""
    out: list[tuple[int, str]] = []

    def walk(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Call):
                f = child.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if called == name:
                    out.append((child.lineno, ".".join(scope)))
            walk(child, scope)

    walk(tree, [])
    return out


def test_run_config_is_built_in_one_place():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        found += [(rel, scope) for _, scope in calls_of(ast.parse(path.read_text(), rel), "RunConfig")]
    assert found == [BUILDER], f"RunConfig(...) outside {BUILDER}: build it with ExperimentConfig.run_config"


def test_the_scan_sees_a_call():
    tree = ast.parse("class A:\n    def f(self):\n        return fl.RunConfig(rounds=1)\nx = RunConfig()")
    assert calls_of(tree, "RunConfig") == [(3, "A.f"), (4, "")]


def test_run_config_carries_the_description():
    cfg = ExperimentConfig(rounds=7, clients_per_round=3, seed=5, ks=[1, 2], lr=0.2, batch_clients=True, dp_delta=1e-6)
    got = cfg.run_config(clients_per_round=2, checkpoint="c.pt", eval_clients=4)
    assert got == RunConfig(
        rounds=7,
        clients_per_round=2,
        train=TrainConfig(epochs=cfg.local_epochs, batch_size=cfg.batch_size, lr=0.2, optimizer=cfg.optimizer),
        seed=5,
        eval_every=cfg.eval_every,
        eval_k=(1, 2),
        checkpoint="c.pt",
        batch_clients=True,
        eval_clients=4,
        sample_delta=1e-6,
    )
    assert cfg.run_config().clients_per_round == 3


def context(**config) -> Context:
    return Context(1, 0, {}, RecordDict(), config)


def test_flower_run_config_keeps_the_loop_defaults():
    assert run_config_from(context()) == RunConfig()
    train = TrainConfig(epochs=2, batch_size=32, lr=0.01, optimizer="adam")
    assert run_config_from(context(), train=train, rounds=4) == RunConfig(train=train, rounds=4)
    got = run_config_from(context(**{"rounds": 3, "eval-k": "1,5", "weight-decay": 0.1, "timeout": 2.0, "lr": 0.5}))
    assert got == RunConfig(rounds=3, eval_k=(1, 5), client_timeout=2.0, train=TrainConfig(lr=0.5, weight_decay=0.1))


def test_flower_sim_run_config():
    s = Settings(rounds=3, epochs=2, checkpoint="x.pt", eval_clients=2)
    assert s.run_config() == RunConfig(
        rounds=3,
        clients_per_round=s.clients_per_round,
        seed=s.seed,
        train=TrainConfig(epochs=2, batch_size=16, lr=0.3),
        client_timeout=s.timeout,
        checkpoint="x.pt",
        eval_clients=2,
    )


@pytest.mark.parametrize(
    "path,cls",
    [
        ("experiments/configuration.py", "ExperimentConfig"),
        ("fl/server.py", "RunConfig"),
        ("experiments/resolve.py", "ResolvedRun"),
    ],
)
def test_every_field_has_an_attribute_docstring(path, cls):
    """The API reference (mkdocstrings) shows a field's docstring, the string right after it; a ``#``
    comment it never shows."""
    tree = ast.parse((SRC / path).read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    bare = [
        node.target.id
        for i, node in enumerate(body)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and not (
            i + 1 < len(body)
            and isinstance(body[i + 1], ast.Expr)
            and isinstance(body[i + 1].value, ast.Constant)
            and isinstance(body[i + 1].value.value, str)
            and body[i + 1].value.value.strip()
        )
    ]
    assert not bare, f"{cls} fields without a docstring: {bare}"
