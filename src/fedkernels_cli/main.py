"""Entry point of the ``fedkernels`` script: parse without torch, then run the command."""

from __future__ import annotations

from collections.abc import Sequence

from .parser import parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``) and run its command; returns the exit status.

    ``--help`` and usage errors exit here; a command imports ``fedkernels`` (and so torch) only if it
    needs it (:mod:`fedkernels_cli.dispatch`)."""
    args = parser().parse_args(argv)
    from .dispatch import run_command

    return run_command(args)
