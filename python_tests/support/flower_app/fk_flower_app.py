"""The test's Flower App: server and client apps built with fedkernels.integrations.flower on the
tiny synthetic data of python_tests/support/fl_data.py (each SuperNode's partition-id picks its client).

Test hooks (run_config): ``result-file`` gets the run's node events after every round; with
``barrier-dir``, after each round the ServerApp writes ``done-<round>`` (and its pid to ``pid``)
there and waits for the test to write ``go-<round>`` (at most 300 s), so the test can stop,
restart or kill processes between rounds. ``secagg`` runs private rounds (SecAgg+); with
``stage-barrier``, after each round's masked-input stage the ServerApp writes ``masked-<round>``
there and waits for ``go-masked-<round>``, so the test can stop nodes that uploaded their input.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from pathlib import Path

from flwr.app import Context

from fedkernels.fl.types import RoundRecord
from fedkernels.integrations.flower import FlowerStrategy, client_app, read_partition_keys, server_app
from python_tests.support.flower_runs import (
    NUM_CLASSES,
    NUM_FEATURES,
    client_data,
    drill_wrapper,
    held_out_data,
    make_strategy,
    run_config,
)


def _server_strategy(ctx: Context) -> FlowerStrategy:
    c = ctx.run_config
    cfg = run_config(
        int(c["rounds"]), int(c["clients-per-round"]), int(c["seed"]), float(c["timeout"]), str(c["checkpoint"]) or None
    )
    keys = str(c["partition-keys"])
    flower = dict(
        federated_evaluation=bool(c["federated-eval"]),
        startup_grace=float(c["startup-grace"]),
        partition_keys=read_partition_keys(keys) if keys else None,
    )
    strategy, n = make_strategy(str(c["strategy"])), int(c["num-clients"])
    if bool(c["secagg"]):
        from fedkernels.fl.privacy import PrivacyConfig
        from fedkernels.integrations.flower.private_server import PrivateFlowerStrategy

        after = functools.partial(_stage_barrier, Path(str(c["stage-barrier"]))) if str(c["stage-barrier"]) else None
        privacy = PrivacyConfig(secagg=True)
        return PrivateFlowerStrategy(strategy, NUM_FEATURES, NUM_CLASSES, n, cfg, privacy, after, **flower)
    return FlowerStrategy(strategy, NUM_FEATURES, NUM_CLASSES, n, cfg, **flower)  # type: ignore[arg-type]


def _stage_barrier(barrier: Path, kind: str, round: int) -> None:
    if kind == "upd/masked":
        (barrier / f"masked-{round}").write_text("")
        end = time.monotonic() + 300
        while not (barrier / f"go-masked-{round}").exists() and time.monotonic() < end:
            time.sleep(0.1)


def _after_round(ctx: Context, fk: FlowerStrategy, rec: RoundRecord | None) -> None:
    c = ctx.run_config
    if str(c["result-file"]):
        out = {
            "rounds": len(fk.history),
            "resumed_from": fk.resumed_from,
            "events": [dataclasses.asdict(e) for e in fk.nodes.events],
            "messages": dict(fk.messages_sent),
        }
        Path(str(c["result-file"])).write_text(json.dumps(out))
    barrier = str(c["barrier-dir"])
    if rec is not None and barrier:
        (Path(barrier) / "pid").write_text(str(os.getpid()))
        (Path(barrier) / f"done-{rec.round}").write_text("")
        end = time.monotonic() + 300
        while not (Path(barrier) / f"go-{rec.round}").exists() and time.monotonic() < end:
            time.sleep(0.1)


def _partition(ctx: Context) -> tuple[int, int, str]:
    return int(ctx.node_config["partition-id"]), int(ctx.run_config["num-clients"]), str(ctx.run_config["strategy"])


server = server_app(
    _server_strategy,
    on_round=lambda ctx, fk, rec: _after_round(ctx, fk, rec),
    on_done=lambda ctx, fk: _after_round(ctx, fk, None),
)
client = client_app(
    lambda ctx: make_strategy(str(ctx.run_config["strategy"])),
    lambda ctx: client_data(*_partition(ctx)),
    wrap=lambda ctx, cid, inner: drill_wrapper(str(ctx.run_config["drill"]))(cid, inner),
    load_eval_data=lambda ctx: held_out_data(*_partition(ctx)),
)
