"""``fedkernels run``: check the flags that go together, then run the experiment
(:func:`fedkernels.experiments.runner.run_experiment`); ``--list-presets`` answers without torch."""

from __future__ import annotations

import argparse

from .presets import PRESET_SEEDS, cmd_list_presets


def cmd_run(args: argparse.Namespace) -> int:
    """Run every configured algorithm (over ``--seeds`` seeds), print the results table, write JSON/CSV/PNG."""
    if args.list_presets:
        return cmd_list_presets()
    from fedkernels.experiments.checkpoints import default_checkpoint_folder
    from fedkernels.experiments.runner import run_experiment

    from .config import configure

    cfg, strategies = configure(args)
    if args.no_checkpoint and (args.resume or args.checkpoint is not None):
        raise ValueError("--no-checkpoint goes with neither --checkpoint nor --resume")
    default_folder = default_checkpoint_folder(cfg.output)  # --resume without --checkpoint looks there too
    auto_checkpoint = not args.no_checkpoint and cfg.checkpoint in (None, default_folder)
    if auto_checkpoint:  # an interrupted run can always be resumed; the folder goes once the run ends
        cfg.checkpoint = default_folder
    args.effective_checkpoint = cfg.checkpoint  # a config file or preset may set it: the Ctrl-C hint reads this
    seeds = args.seeds if args.seeds is not None else (PRESET_SEEDS if args.preset else 1)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    return run_experiment(
        cfg,
        strategies,
        seeds=seeds,
        preset=args.preset,
        progress=not args.no_progress,
        remove_checkpoints_after=auto_checkpoint,
    )
