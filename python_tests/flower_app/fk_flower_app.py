"""The test's Flower App: server and client apps built with fedkernels.integrations.flower on the
tiny synthetic data of python_tests/fl_data.py (each SuperNode's partition-id picks its client)."""

from __future__ import annotations

from flwr.app import Context

from fedkernels.integrations.flower import FlowerStrategy, client_app, server_app
from python_tests.flower_runs import (
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
    return FlowerStrategy(
        make_strategy(str(c["strategy"])),
        NUM_FEATURES,
        NUM_CLASSES,
        int(c["num-clients"]),
        cfg,
        federated_evaluation=bool(c["federated-eval"]),
    )


def _partition(ctx: Context) -> tuple[int, int, str]:
    return int(ctx.node_config["partition-id"]), int(ctx.run_config["num-clients"]), str(ctx.run_config["strategy"])


server = server_app(_server_strategy)
client = client_app(
    lambda ctx: make_strategy(str(ctx.run_config["strategy"])),
    lambda ctx: client_data(*_partition(ctx)),
    wrap=lambda ctx, cid, inner: drill_wrapper(str(ctx.run_config["drill"]))(cid, inner),
    load_eval_data=lambda ctx: held_out_data(*_partition(ctx)),
)
