"""An experiment's run: each algorithm over the prepared data, evaluated per round.

This is what ``fedkernels run`` executes once the config is resolved
(:func:`~fedkernels.experiments.resolve.resolve_run`) and the data prepared
(:func:`~fedkernels.experiments.preparation.prepare_data`): both functions take the
:class:`~fedkernels.experiments.resolve.ResolvedRun` and look no name up. Everything (data, partition, client
sampling, training) derives from ``ExperimentConfig.seed``, so a config reproduces its numbers. The
configuration and the preparation live in :mod:`.configuration` and :mod:`.preparation`; their names
are re-exported here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from fedkernels_cli.defaults import DEFAULT_OPTIONS

from ..fl.server import Server, record_from_json
from ..fl.strategy import Strategy
from ..fl.types import ClientData, RoundRecord
from ..metrics import communication_summary, retrieval_map
from .checkpoints import checkpoint_path, run_options
from .configuration import (
    ExperimentConfig,
    check_option_types,
    check_privacy,
    config_keys,
    load_config,
    metric_columns,
    parse_toml,
    privacy_config,
)
from .names import canonical_name
from .preparation import (
    PreparedData,
    auto_feature_dim,
    concat_clients,
    hold_out_per_client,
    prepare_data,
)
from .resolve import ResolvedRun, as_resolved
from .strategies import run_strategy

RETRIEVAL_CUTOFF = 10
"""The fixed cutoff of the retrieval metric reported beside MAP@R (``rMAP@10``: the FedSS paper's
"MAP@R with R = 10", :func:`~fedkernels.metrics.retrieval_map_at_k`)."""

# this module's names and, re-exported, the configuration's and the preparation's (their import paths
# from before the split)
__all__ = [
    "DEFAULT_OPTIONS",
    "RETRIEVAL_CUTOFF",
    "AllClientsFailed",
    "ExperimentConfig",
    "PreparedData",
    "add_common_target",
    "auto_feature_dim",
    "best_values",
    "canonical_name",
    "check_option_types",
    "check_privacy",
    "concat_clients",
    "config_keys",
    "evaluate_held_out",
    "evaluate_shared_test",
    "hold_out_per_client",
    "late_window_means",
    "load_config",
    "metric_columns",
    "parse_toml",
    "prepare_data",
    "privacy_config",
    "published_history",
    "redact_secrets",
    "run_algorithm",
    "run_centralized",
]


SHARED = "client-shared-"
"""The prefix of the metrics of every client's model on the shared test set (:func:`evaluate_shared_test`)."""


class AllClientsFailed(RuntimeError):
    """Every client of a round failed: the run cannot go on (the message lists their reasons)."""


def redact_secrets(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as results may record them: a ``client_secret`` becomes its one-way key id."""
    from ..fl.labelsets import check_secret, key_id

    out = dict(options)
    if "client_secret" in out:
        try:
            out["client_secret"] = f"<redacted; key id {key_id(check_secret(out['client_secret']))}>"
        except ValueError:
            out["client_secret"] = "<redacted>"
    return out


def run_algorithm(
    name: str,
    run: ResolvedRun | ExperimentConfig,
    data: PreparedData,
    on_round: Callable[[RoundRecord], None] | None = None,
    on_resume: Callable[[list[RoundRecord]], None] | None = None,
    strategy: Strategy | None = None,
) -> dict[str, Any]:
    """Run one algorithm for the config's rounds; returns its history, final metrics and bytes.

    With a checkpoint folder the server checkpoints after every round (evaluation included) and, with
    ``resume``, continues from the checkpoint it finds there; ``on_resume`` then gets the rounds the
    checkpoint holds (a progress display starts from them), ``on_round`` each new round.

    Args:
        name: the algorithm, as registered (one of the run's; any case with a plain config).
        run: the resolved run (:func:`~fedkernels.experiments.resolve.resolve_run`); an
            :class:`ExperimentConfig` is resolved here first, ``name`` with it (the Python API).
        data: :func:`~fedkernels.experiments.preparation.prepare_data` of the run.
        on_round: called with each new round's record.
        on_resume: called with the rounds a resumed checkpoint holds.
        strategy: the algorithm's object (default:
            :func:`~fedkernels.experiments.strategies.run_strategy`, the one the resolution built).

    Raises:
        AllClientsFailed: every client of some round failed (their reasons in the message).
        ValueError: ``name`` is not one of the run's algorithms; or the checkpoint folder already holds
            this algorithm's checkpoint and ``resume`` is not set (a run never overwrites one).
    """
    if not isinstance(run, ResolvedRun):  # the Python API's top: the name is resolved with the config
        run, name = as_resolved(run), canonical_name(name)
    cfg = run.config
    if strategy is None:
        strategy = run_strategy(name, run)
    options = run_options(name, run)
    per_round = min(cfg.clients_per_round, len(data.clients))
    ckpt = checkpoint_path(run, name)
    if ckpt is not None and strategy.stateful_clients:
        # what its clients kept is in no checkpoint, so a resumed run would differ: never resumed, never
        # saved (the CLI checkpoints every run by default; this algorithm then runs without)
        if cfg.resume and ckpt.exists():
            raise ValueError(f"checkpoint: {strategy.name} has stateful clients, which checkpoints do not hold")
        print(
            f"{strategy.name}: stateful clients (their kept tensors are in no checkpoint): runs without a checkpoint",
            file=sys.stderr,
        )
        ckpt = None
    resuming = ckpt is not None and ckpt.exists()
    if resuming and not cfg.resume:
        raise ValueError(f"checkpoint {ckpt} exists: pass --resume to continue that run, or choose another folder")
    # the server resumes from the checkpoint and saves every round
    run_cfg = cfg.run_config(clients_per_round=per_round, checkpoint=None if ckpt is None else str(ckpt))
    t0 = time.perf_counter()
    if ckpt is not None:
        ckpt.parent.mkdir(parents=True, exist_ok=True)
    if cfg.private():
        from ..fl.privacy import PrivateServer

        server: Server = PrivateServer(
            strategy, data.clients, data.dataset.num_features, data.dataset.num_classes, run_cfg, privacy_config(cfg)
        )
    else:
        server = Server(strategy, data.clients, data.dataset.num_features, data.dataset.num_classes, run_cfg)
    if resuming and on_resume is not None:
        on_resume(server.history)
    resumed_at = server.round
    server.run(on_round=on_round, after_round=lambda rec: _after_round(server, rec, cfg, data))
    evaluated = [r for r in server.history if r.metrics]
    privacy = server.history[-1].privacy if server.history else {}
    return {
        "privacy": privacy,
        "algorithm": strategy.name,
        "options": redact_secrets(options),
        "final": evaluated[-1].metrics if evaluated else {},
        "late": late_window_means(server.history, cfg.late_window, cfg.rounds),
        "best": best_values(server.history),
        "diagnostics": strategy.diagnostics(server.state),
        "model_bytes": strategy.model_bytes(server.state),
        "seconds": time.perf_counter() - t0,
        "resumed_at_round": resumed_at,
        "failed_clients": sum(len(r.failed) for r in server.history),
        "history": [asdict(r) for r in published_history(server.history, cfg)],
        "comm": communication_summary(server.history, "P@1", strategy.model_bytes(server.state)),
    }


def published_history(history: list[RoundRecord], cfg: ExperimentConfig) -> list[RoundRecord]:
    """The rounds as a run's result files may show them: under client-level DP a round's sample is
    secret, so its client ids and the counts that reveal how many took part are left out
    (:func:`~fedkernels.fl.privacy.mechanism.published_record`)."""
    if cfg.dp_clip is None:
        return history
    from ..fl.privacy.mechanism import published_record

    return [published_record(r) for r in history]


def _after_round(server: Server, rec: RoundRecord, cfg: ExperimentConfig, data: PreparedData) -> None:
    """An experiment's work on each round before it is checkpointed: stop when every client failed,
    and evaluate every ``eval_every`` rounds and at the last (the server accounts privacy itself)."""
    if rec.clients and len(rec.failed) == len(rec.clients):
        reasons = "; ".join(f"client {c}: {why}" for c, why in rec.failed[:3])
        raise AllClientsFailed(
            f"{server.strategy.name}: every client of round {rec.round + 1} failed ({reasons}"
            + (", ..." if len(rec.failed) > 3 else "")
            + ")"
        )
    if (rec.round + 1) % cfg.eval_every == 0 or rec.round + 1 == cfg.rounds:
        rec.metrics = server.evaluate(
            data.test, tuple(cfg.ks), 2048, data.inv_propensity, data.frequent, data.test_filter
        )
        if data.held_out is not None:
            rec.metrics.update({f"client-{k}": v for k, v in evaluate_held_out(server, data.held_out, cfg).items()})
            rec.metrics.update({f"{SHARED}{k}": v for k, v in evaluate_shared_test(server, data.test, cfg).items()})
        embedded = server.strategy.embed(server.state, data.test.x.to(server.device)) if cfg.retrieval else None
        if embedded is not None:
            got = retrieval_map(embedded.cpu(), data.test.indptr, data.test.indices, (RETRIEVAL_CUTOFF,))
            rec.metrics["MAP@R"] = got["MAP@R"]
            rec.metrics[f"rMAP@{RETRIEVAL_CUTOFF}"] = got[f"MAP@{RETRIEVAL_CUTOFF}"]


def evaluate_held_out(server: Server, held_out: list[ClientData], cfg: ExperimentConfig) -> dict[str, float]:
    """The per-client metrics: each client's held-out rows ranked by the model it would use
    (:meth:`~fedkernels.fl.Server.evaluate_clients`); for a run over other clients than the held-out
    sets' (the centralised bound), the global model on every set, weighted by its rows. Under secure
    aggregation every client ranks its own set and the reports are summed by SecAgg+
    (:meth:`~fedkernels.fl.privacy.PrivateServer.evaluate_federated`): no report leaves a client alone."""
    if len(held_out) == len(server.clients):
        if getattr(getattr(server, "privacy", None), "secagg", False):
            return server.evaluate_federated(held_out, tuple(cfg.ks))[0]
        return server.evaluate_clients(held_out, tuple(cfg.ks))
    sums: dict[str, float] = {}
    total = 0
    for data in held_out:
        if not len(data):
            continue
        got = server.evaluate(data, tuple(cfg.ks))
        total += len(data)
        for k, v in got.items():
            sums[k] = sums.get(k, 0.0) + len(data) * v
    return {k: v / total for k, v in sums.items()} if total else {}


def evaluate_shared_test(server: Server, test: ClientData, cfg: ExperimentConfig) -> dict[str, float]:
    """Every client's model on the shared test set, the mean over the clients
    (:meth:`~fedkernels.fl.Server.evaluate_clients_on`; reported as ``client-shared-P@k``). Under secure
    aggregation the server never sees a client's model, so nothing is reported."""
    if getattr(getattr(server, "privacy", None), "secagg", False):
        return {}
    return server.evaluate_clients_on(test, tuple(cfg.ks))


def late_window_means(history: list[RoundRecord], window: float, rounds: int) -> dict[str, float]:
    """Each metric's mean over the evaluations in the last ``window`` share of ``rounds`` (at least
    the last evaluation), with ``"evaluations"``: how many that is."""
    start = rounds - max(1, round(window * rounds))
    late = [r.metrics for r in history if r.metrics and r.round >= start]
    if not late:
        evaluated = [r.metrics for r in history if r.metrics]
        late = evaluated[-1:]
    names = sorted({k for m in late for k in m})
    out = {k: sum(m[k] for m in late if k in m) / sum(1 for m in late if k in m) for k in names}
    return {**out, "evaluations": float(len(late))}


def best_values(history: list[RoundRecord]) -> dict[str, float]:
    """Each metric's best (largest) value over the run's evaluations, with ``"round <metric>"``: the
    1-based round it was first reached."""
    out: dict[str, float] = {}
    for r in history:
        for k, v in r.metrics.items():
            if k not in out or v > out[k]:
                out[k], out[f"round {k}"] = v, float(r.round + 1)
    return out


def run_centralized(
    name: str,
    run: ResolvedRun | ExperimentConfig,
    data: PreparedData,
    on_round: Callable[[RoundRecord], None] | None = None,
    strategy: Strategy | None = None,
) -> dict[str, Any]:
    """The centralised upper bound of algorithm ``name``: one client holding the whole training set
    with its original labels, every round, with the run's rounds, epochs and the algorithm's options,
    and no checkpoint (an :class:`ExperimentConfig` is resolved first, as :func:`run_algorithm` does).
    The result's ``algorithm`` is ``"<name> (centralized)"``."""
    tr = data.dataset.train
    pooled = ClientData(tr.x, tr.indptr, tr.indices, data.dataset.num_classes)
    # the clients' held-out rows stay out of the pooled training set and rank under the pooled model
    if data.held_out is not None:
        pooled = concat_clients(data.clients)
    one = PreparedData(
        data.dataset,
        [pooled],
        data.test,
        data.inv_propensity,
        data.frequent,
        data.held_out,
        data.split,
        data.test_filter,
    )
    if not isinstance(run, ResolvedRun):  # the Python API's top, as in run_algorithm
        run, name = as_resolved(run), canonical_name(name)
    solo = run.replaced(clients_per_round=1, checkpoint=None)
    result = run_algorithm(name, solo, one, on_round, strategy=strategy)
    result["algorithm"] = f"{result['algorithm']} (centralized)"
    return result


def add_common_target(results: list[dict[str, Any]], metric: str = "P@1") -> float | None:
    """Rounds and bytes each algorithm needed to reach the lowest best ``metric`` among them (a
    level every algorithm reached), stored in each result's ``comm`` as ``*_to_target``."""
    bests = [r["comm"]["best"] for r in results if r["comm"]["best"] is not None]
    if not bests:
        return None
    target = min(bests)
    for r in results:
        s = communication_summary([record_from_json(h) for h in r["history"]], metric, r["model_bytes"], target)
        r["comm"].update(target=target, rounds_to_target=s["rounds_to_target"], bytes_to_target=s["bytes_to_target"])
    return target
