"""Entry point of the ``fedkernels`` script: parse without torch, then run the command."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .parser import parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run its command; returns the exit status.

    ``--help`` and usage errors exit here; a command imports ``fedkernels`` (and so torch) only if it
    needs it (:mod:`fedkernels_cli.dispatch`)."""
    args = parser().parse_args(argv)
    if args.command == "run" and "torch" not in sys.modules:
        # torch's OpenMP reads this once, when torch loads: waiting threads sleep instead of spinning,
        # so a run with --threads above 1 does not burn the CPU a descheduled partner needs.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from .dispatch import run_command

    return run_command(args)
