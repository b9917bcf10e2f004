"""Aggregating one experiment run over several seeds: mean and sample standard deviation per algorithm."""

from __future__ import annotations

import math
import statistics
from typing import Any

SEED_METRICS = ("P@1", "P@3", "P@5")


def default_metrics(runs: list[list[dict[str, Any]]]) -> tuple[str, ...]:
    """The metrics a seed table shows: P@1, P@3, P@5; where the runs evaluated each client on its own
    held-out rows, their per-client forms ``client-P@k`` instead, led by every client's model on the
    shared test set (``client-shared-P@k``, where reported) and followed by the global model's P@1."""
    finals = [r["final"] for results in runs for r in results]
    if not any("client-P@1" in f for f in finals):
        return SEED_METRICS
    per_client = tuple(f"client-{m}" for m in SEED_METRICS)
    if not any("client-shared-P@1" in f for f in finals):
        return per_client
    return (*(f"client-shared-{m}" for m in SEED_METRICS), *per_client, "P@1")


def seed_summary(
    runs: list[list[dict[str, Any]]], paper: dict[str, float] | None = None, metrics: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    """One row per algorithm over the seeds' results.

    Args:
        runs: one list of :func:`~fedkernels.experiments.run_algorithm` results per seed.
        paper: algorithm -> the paper's P@1 in percent (a preset's ``p_at_1``), shown beside ours.
        metrics: the final metrics to aggregate (default: :func:`default_metrics`).

    Returns:
        rows with ``algorithm``, ``seeds``, ``<metric> mean`` and ``<metric> std`` (sample standard
        deviation; ``None`` for one seed, which has no spread), ``model MB``, ``failed clients`` and
        ``paper P@1`` (a fraction, ``None`` where the paper has no number). Algorithms appear in first-seen order.
    """
    if metrics is None:
        metrics = default_metrics(runs)
    order: list[str] = []
    by_alg: dict[str, list[dict[str, Any]]] = {}
    for results in runs:
        for r in results:
            if r["algorithm"] not in by_alg:
                order.append(r["algorithm"])
            by_alg.setdefault(r["algorithm"], []).append(r)
    paper_lc = {k.lower(): v for k, v in (paper or {}).items()}
    rows = []
    for alg in order:
        group = by_alg[alg]
        row: dict[str, Any] = {"algorithm": alg, "seeds": len(group)}
        for m in metrics:
            values = [float(r["final"][m]) for r in group if m in r["final"] and not math.isnan(r["final"][m])]
            row[f"{m} mean"] = statistics.mean(values) if values else None
            row[f"{m} std"] = statistics.stdev(values) if len(values) > 1 else None
        # the first metric's late-window mean and best value (rounds-level noise), and the per-seed values
        first = metrics[0] if metrics else "P@1"
        for kind in ("late", "best"):
            values = [float(r[kind][first]) for r in group if first in r.get(kind, {})]
            row[f"{kind} {first} mean"] = statistics.mean(values) if values else None
            row[f"{kind} {first} std"] = statistics.stdev(values) if len(values) > 1 else None
        row[f"{first} per seed"] = [r["final"].get(first) for r in group]
        row[f"late {first} per seed"] = [r.get("late", {}).get(first) for r in group]
        row["model MB"] = group[0]["model_bytes"] / 1e6
        row["failed clients"] = sum(r.get("failed_clients", 0) for r in group)
        pp = paper_lc.get(alg.lower())
        row["paper P@1"] = None if pp is None else pp / 100.0
        rows.append(row)
    return rows


def seed_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of :func:`seed_summary` rows: ``mean ± std`` per metric (the value alone where a
    row has one seed), ours beside the paper's."""
    keys = [k for k in rows[0] if k.endswith(" mean")] if rows else []
    metrics = [k[: -len(" mean")] for k in keys if any(r.get(k) is not None for r in rows)]
    head = ["algorithm", "seeds", *metrics, "paper P@1", "model MB", "failed clients"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["algorithm"], str(r["seeds"])]
        for m in metrics:
            mean, std = r.get(f"{m} mean"), r.get(f"{m} std")
            cells.append("-" if mean is None else f"{mean:.4f}" if std is None else f"{mean:.4f} ± {std:.4f}")
        cells.append("n/a" if r["paper P@1"] is None else f"{r['paper P@1']:.4f}")
        cells.append(f"{r['model MB']:.4f}")
        cells.append(str(r["failed clients"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
