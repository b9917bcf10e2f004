"""Every strategy over Flower messages, in one process: the Flower test app's ServerApp strategy and
ClientApp (python_tests/support/flower_app, as the deployment test runs them) exchange real Flower
Messages and ArrayRecords through an in-memory grid (support/flower_grid.py), with the deployment's
nodes (a second node claiming client 1), crash and garbage upload. Each strategy ends bit-identical
to the in-process Server with the same seed, faults and data, round records and federated metrics
included. The deployment test (hardening/test_flower.py) runs the same app across processes."""

from __future__ import annotations

import dataclasses

import pytest
import tomllib

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

from flwr.app import Context, RecordDict

from python_tests.support.flower_grid import MemoryGrid, context, task_identity
from python_tests.support.flower_runs import (
    DRILL,
    FED_EVAL,
    NUM_CLIENTS,
    PER_ROUND,
    ROUNDS,
    SEED,
    STRATEGIES,
    assert_matches_reference,
)
from python_tests.support.paths import ROOT

APP = ROOT / "python_tests" / "support" / "flower_app"


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    task_identity(monkeypatch)


def app_config(strategy: str, checkpoint: str) -> dict:
    """The app's run config (its pyproject's defaults) with the deployment test's overrides."""
    config = tomllib.loads((APP / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"]
    return {
        **config,
        "strategy": strategy,
        "checkpoint": checkpoint,
        "drill": DRILL,
        "rounds": ROUNDS,
        "seed": SEED,
        "num-clients": NUM_CLIENTS,
        "clients-per-round": PER_ROUND,
        "federated-eval": strategy in FED_EVAL,
    }


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_over_flower_messages_matches_in_process(strategy, tmp_path):
    from python_tests.support.flower_app import fk_flower_app as app

    cfg = app_config(strategy, str(tmp_path / "run.ckpt"))
    run = 100 + STRATEGIES.index(strategy)  # a run of its own: the client app caches nodes per run
    # nodes 0..2 serve clients 0..2; node 3 also claims client 1 (refused, as in the deployment)
    partitions = {**{n: n for n in range(NUM_CLIENTS)}, NUM_CLIENTS: 1}
    grid = MemoryGrid({node: (app.client, context(node, part, cfg, run)) for node, part in partitions.items()})
    fk = app._server_strategy(Context(run, 0, {}, RecordDict(), cfg))
    fk.start(grid)
    assert_matches_reference(strategy, tmp_path / "run.ckpt", [dataclasses.asdict(e) for e in fk.nodes.events])
