"""Run a parsed ``fedkernels`` command and turn its failures into one line and an exit status."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from ..data.fetcher import DownloadError
from ..experiments.experiment import AllClientsFailed
from .bench import cmd_bench
from .data import cmd_data
from .info import cmd_info
from .run import cmd_run

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "data": cmd_data,
    "bench": cmd_bench,
    "info": cmd_info,
}


def run_command(args: argparse.Namespace) -> int:
    """Run ``args.command`` (parsed by :func:`fedkernels_cli.parser.parser`); returns the exit status:
    0 done, 1 the run failed, 2 a bad input or file, 130 interrupted."""
    try:
        return int(COMMANDS[args.command](args) or 0)
    except KeyboardInterrupt:  # one line, no traceback: what was saved and how to go on
        print(f"\nfedkernels {args.command}: interrupted. {resume_hint(args)}", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, DownloadError) as e:
        print(f"fedkernels {args.command}: error: {e}", file=sys.stderr)
        return 2
    except AllClientsFailed as e:
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
