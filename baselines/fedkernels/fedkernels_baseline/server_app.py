"""The ServerApp: the preset's algorithm over Flower, evaluated on the preset's test split after
every ``eval_every`` rounds (the metrics of ``fedkernels run``), resumable from its checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from flwr.app import Context

from fedkernels.fl import State, Strategy
from fedkernels.fl.types import RoundRecord
from fedkernels.integrations.flower import FlowerStrategy, read_partition_keys, server_app
from fedkernels.metrics import ranking_metrics
from fedkernels.sparse_rows import slice_rows

from .task import algorithm, data, experiment, run_config, strategy


def flower_strategy(context: Context) -> FlowerStrategy:
    cfg, prepared = experiment(context), data(context)
    c = context.run_config
    keys = str(c["partition-keys"])
    return FlowerStrategy(
        strategy(context),
        prepared.dataset.num_features,
        prepared.dataset.num_classes,
        len(prepared.clients),
        run_config(context, cfg, len(prepared.clients)),
        federated_evaluation=bool(c["federated-eval"]),
        startup_grace=float(c["startup-grace"]),
        partition_keys=read_partition_keys(keys) if keys else None,
    )


def evaluate(server_round: int, strat: Strategy, state: State, context: Context) -> dict[str, float]:
    """The preset's test metrics (P@k, nDCG@k, PSP@k, frequent/infrequent P@k), as ``fedkernels run``."""
    prepared, cfg = data(context), experiment(context)
    test, ks = prepared.test, tuple(cfg.ks)
    kmax = min(max(ks), test.num_classes)
    preds = [strat.predict_topk(state, slice_rows(test.x, i, i + 2048), kmax) for i in range(0, len(test), 2048)]
    topk = torch.cat(preds) if preds else torch.empty(0, kmax, dtype=torch.int64)
    return ranking_metrics(
        topk, test.indptr, test.indices, tuple(k for k in ks if k <= kmax), prepared.inv_propensity, prepared.frequent
    )


def write_result(context: Context, fk: FlowerStrategy, rec: RoundRecord | None = None) -> None:
    """Write the run so far to ``result-file`` (JSON) when one is named."""
    path = str(context.run_config["result-file"])
    if not path:
        return
    cfg = experiment(context)
    out = {
        "preset": str(context.run_config["preset"]),
        "algorithm": algorithm(context, cfg),
        "seed": cfg.seed,
        "resumed_from": fk.resumed_from,
        "rounds": [dataclasses.asdict(h) for h in fk.history],
    }
    Path(path).write_text(json.dumps(out, indent=1))


app = server_app(
    flower_strategy,
    evaluate_fn=evaluate,
    on_round=lambda ctx, fk, rec: write_result(ctx, fk, rec),
    on_done=lambda ctx, fk: write_result(ctx, fk),
)
