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

    run = configure(args)  # resolved once, its checkpoint folder decided: everything below takes it
    cfg = run.config
    # the default folder (given or not) is the CLI's own: it goes once the run's results are written
    auto_checkpoint = not args.no_checkpoint and cfg.checkpoint == default_checkpoint_folder(cfg.output)
    args.effective_checkpoint = cfg.checkpoint  # a config file or preset may set it: the Ctrl-C hint reads this
    seeds = args.seeds if args.seeds is not None else (PRESET_SEEDS if args.preset else 1)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    return run_experiment(
        run,
        seeds=seeds,
        preset=args.preset,
        progress=not args.no_progress,
        remove_checkpoints_after=auto_checkpoint,
    )
