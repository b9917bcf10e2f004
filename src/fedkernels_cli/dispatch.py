"""Run a parsed ``fedkernels`` command and turn its failures into one line and an exit status.

Each command's module is imported only when that command runs, so the commands that need no torch
(``bench``, ``data list``, ``run --list-presets``) answer without loading it."""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from pathlib import Path

# command -> (module of this package, function): imported when the command runs
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "cmd_run"),
    "data": ("data", "cmd_data"),
    "bench": ("bench", "cmd_bench"),
    "info": ("info", "cmd_info"),
}


def _loaded(module: str, name: str) -> tuple[type[BaseException], ...]:
    """``(module.name,)`` if ``module`` is already imported, else ``()`` (an ``except`` that catches nothing):
    an error class of fedkernels can only have been raised once its module ran."""
    mod = sys.modules.get(module)
    return (getattr(mod, name),) if mod is not None else ()


def run_command(args: argparse.Namespace) -> int:
    """Run ``args.command`` (parsed by :func:`fedkernels_cli.parser.parser`); returns the exit status:
    0 done, 1 the run failed, 2 a bad input or file, 130 interrupted."""
    module, function = COMMANDS[args.command]
    try:
        command = getattr(importlib.import_module(f"{__package__}.{module}"), function)
        return int(command(args) or 0)
    except KeyboardInterrupt:  # one line, no traceback: what was saved and how to go on
        print(f"\nfedkernels {args.command}: interrupted. {resume_hint(args)}", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as e:
        print(f"fedkernels {args.command}: error: {e}", file=sys.stderr)
        return 2
    except _loaded("fedkernels.data.fetcher", "DownloadError") as e:
        print(f"fedkernels {args.command}: error: {e}", file=sys.stderr)
        return 2
    except _loaded("fedkernels.experiments.experiment", "AllClientsFailed") as e:
        print(f"fedkernels {args.command}: run failed: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a disk or permission failure: one line naming the file, not a traceback
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        print(f"fedkernels {args.command}: error: {e.strerror or e}{where}", file=sys.stderr)
        return 2


def resume_hint(args: argparse.Namespace) -> str:
    """How to continue an interrupted command: the same command with ``--resume`` when it checkpointed."""
    if args.command != "run":
        return ""
    argv = sys.argv[1:] if sys.argv and Path(sys.argv[0]).name.startswith("fedkernels") else None
    if getattr(args, "effective_checkpoint", None) is None:
        return "Nothing was saved (--no-checkpoint): run without it to make a run resumable."
    if argv is None:
        return "Run the same command with --resume to continue from its last finished round."
    again = [a for a in argv if a != "--resume"] + ["--resume"]
    return "Continue from its last finished round with: fedkernels " + shlex.join(again)
