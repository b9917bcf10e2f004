"""What ``fedkernels run`` executes once its flags are parsed and its run resolved: every algorithm
over one or more seeds, with progress, the results table and the result files. Every function here
takes the :class:`~fedkernels.experiments.resolve.ResolvedRun`; only :func:`run_experiment`, the
Python API's entry, resolves a plain config (once)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..fl.types import RoundRecord
from . import experiment
from .checkpoints import check_checkpoints, remove_checkpoints, saved_checkpoints
from .model_memory import check_run_memory, loaded_shape
from .outputs import check_outputs, write_run_outputs, write_seed_outputs
from .report import TABLE_COLUMNS, results_table, terminal_table
from .resolve import ResolvedRun, as_resolved
from .strategies import check_against_data, run_strategy

if TYPE_CHECKING:
    from .configuration import ExperimentConfig


def run_experiment(
    run: ResolvedRun | ExperimentConfig,
    *,
    seeds: int = 1,
    preset: str | None = None,
    progress: bool = True,
    remove_checkpoints_after: bool = False,
) -> int:
    """Run a resolved run and write its results; returns the exit status (0).

    Args:
        run: what :func:`~fedkernels.experiments.resolve.resolve_run` gave (the CLI resolved it, its
            checkpoint folder decided); an :class:`ExperimentConfig` is resolved here, once.
        seeds: run seeds ``seed .. seed + seeds - 1`` into ``<output>/seed<k>/`` and report
            mean ± std; with 1 and no ``preset``, the one run writes into the config's output itself.
        preset: the preset name the config came from (its paper P@1 goes beside the summary).
        progress: show a progress bar per algorithm.
        remove_checkpoints_after: delete the checkpoints once the results are written.
    """
    run = as_resolved(run)
    cfg = run.config
    check_outputs(run)  # both before any data is read: results are never lost to a late error
    check_checkpoints(run)
    if cfg.resume and not saved_checkpoints(run):
        print(
            f"fedkernels run: --resume: no checkpoint to resume in {cfg.checkpoint}; starting at round 0",
            file=sys.stderr,
        )
    before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        if seeds == 1 and preset is None:
            run_once(run, Path(cfg.output), progress)
        else:
            run_seeds(run, seeds, preset, progress)
    finally:  # in-process callers (tests, notebooks) keep their own setting
        torch.set_num_threads(before)
    if remove_checkpoints_after:
        remove_checkpoints(run)
    return 0


def run_seeds(run: ResolvedRun, seeds: int, preset: str | None, progress: bool) -> None:
    """The run at seeds ``seed .. seed + seeds - 1``; mean ± std per algorithm, beside the paper's P@1."""
    from .presets import load_preset
    from .seeds import seed_summary, seed_table

    cfg = run.config
    loaded = load_preset(preset) if preset else None
    out = Path(cfg.output)
    runs = []
    for i in range(seeds):
        seed = cfg.seed + i
        print(f"\n== seed {seed} ({i + 1}/{seeds}) ==", flush=True)
        one = run.replaced(
            seed=seed,
            output=str(out / f"seed{seed}"),
            checkpoint=None if cfg.checkpoint is None else str(Path(cfg.checkpoint) / f"seed{seed}"),
        )
        runs.append(run_once(one, Path(one.config.output), progress))
    rows = seed_summary(runs, loaded.p_at_1 if loaded else None)
    table = seed_table(rows)
    spread = f"mean ± std over {seeds} seeds (sample std)" if seeds > 1 else "one seed (--seeds N for mean ± std)"
    print(f"\n{spread}, final round" + (f"; paper: {loaded.source}" if loaded else ""))
    print(table)
    if loaded is not None:
        print(f"\n{loaded.dataset_note}")
    write_seed_outputs(out, preset, list(range(cfg.seed, cfg.seed + seeds)), rows, table)
    print(f"\nwrote {out}/seeds.md, seeds.json")


def run_once(run: ResolvedRun, out: Path, progress: bool) -> list[dict[str, Any]]:
    """One seed: read and partition the data, run every algorithm (then the centralised bounds), print
    the results table and write the result files into ``out``. Returns each algorithm's result."""
    cfg = run.config
    data = experiment.prepare_data(run)
    ds = data.dataset
    mine = {name: run_strategy(name, run) for name in cfg.algorithms}
    check_against_data(list(mine.values()), ds.num_classes)
    check_run_memory(cfg, mine.values(), loaded_shape(data.clients, len(data.test), ds.num_features, ds.num_classes))
    print(
        f"dataset {ds.name}: {len(ds.train)} train / {len(data.test)} test samples, {ds.num_features} features, "
        f"{ds.num_classes} classes; partition {cfg.partition} over {len(data.clients)} clients",
        flush=True,
    )
    results = []
    for name in cfg.algorithms:
        with _Progress(name, cfg.rounds, progress) as bar:
            results.append(experiment.run_algorithm(name, run, data, bar.on_round, bar.on_resume, strategy=mine[name]))
    for name in cfg.centralized:  # the centralised run keeps no checkpoint, so it never resumes
        with _Progress(f"{name} (centralized)", cfg.rounds, progress) as bar:
            strategy = run_strategy(name, run.replaced(checkpoint=None))
            results.append(experiment.run_centralized(name, run, data, bar.on_round, strategy=strategy))
    target = experiment.add_common_target(results)
    # the chosen metric families at every k, then the communication columns
    rest = [c for c in TABLE_COLUMNS[1:] if "@" not in c or c.startswith("best") or c.endswith("freq")]
    columns = ["algorithm", *experiment.metric_columns(cfg.metrics, cfg.ks), *rest]
    table = results_table(results, columns)  # every column, for results.md
    print()
    print(terminal_table(results, columns))
    if target is not None:
        print(f"\nMB to target: communication until test P@1 >= {target:.4f} (the lowest best P@1 of the algorithms).")
    _print_privacy(cfg, results)
    failed = sum(r["failed_clients"] for r in results)
    if failed:
        print(f"\nwarning: {failed} client updates failed and were left out (reasons per round in results.json)")
    png = write_run_outputs(out, run, data, results, target, table)
    print(
        f"\nwrote {out}/results.json, results.md, rounds.csv"
        + (", accuracy.png" if png else " (install matplotlib for accuracy.png)")
    )
    return results


def _print_privacy(cfg: ExperimentConfig, results: list[dict[str, Any]]) -> None:
    """One line per privacy guarantee a result reports, for each observer (docs/api/privacy.md)."""
    for r in results:
        priv = r.get("privacy") or {}
        seeded = " (a seeded simulation: a deployment draws noise and sample from OS randomness)"
        note = seeded if priv.get("seeded") else ""
        if "epsilon" in priv:
            print(
                f"{r['algorithm']}: client-level DP after {cfg.rounds} rounds at δ = {cfg.dp_delta:g}: "
                f"ε = {priv['epsilon']:.3g} for observers of the released models, "
                f"ε = {priv['epsilon_server']:.3g} against the server{note}"
            )
        if "sample_epsilon" in priv:
            print(f"{r['algorithm']}: sample-level DP-SGD, ε = {priv['sample_epsilon']:.3g} at δ = {cfg.dp_delta:g}")


class _Progress:
    """A run's progress bar on stderr: rounds, cumulative MB, P@1, failed clients and ε as they come."""

    def __init__(self, label: str, rounds: int, show: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=rounds, desc=f"{label:>8}", unit="round", disable=not show, file=sys.stderr)
        self.label, self.rounds, self.mb = label, rounds, 0

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()

    def on_round(self, rec: RoundRecord) -> None:
        """Advance one round."""
        self.mb += rec.bytes_up + rec.bytes_down
        post = {"MB": f"{self.mb / 1e6:.1f}"}
        if "P@1" in rec.metrics:
            post["P@1"] = f"{rec.metrics['P@1']:.3f}"
        if rec.failed:
            post["failed"] = str(len(rec.failed))
        if "epsilon" in rec.privacy:
            post["ε"] = f"{rec.privacy['epsilon']:.3g}"
        self.bar.set_postfix(post)
        self.bar.update(1)

    def on_resume(self, history: list[RoundRecord]) -> None:
        """Start where a resumed run stopped: say so (with or without a bar), then count its rounds and bytes."""
        done = len(history)
        where = f"round {done + 1} of {self.rounds}" if done < self.rounds else f"its end ({self.rounds} rounds done)"
        self.bar.write(
            f"{self.label}: resumed from its checkpoint after {done} rounds; continuing at {where}", sys.stdout
        )
        self.mb = sum(r.bytes_up + r.bytes_down for r in history)
        self.bar.update(len(history))
        self.bar.set_postfix({"MB": f"{self.mb / 1e6:.1f}"})
