"""The ``fedkernels`` command (``run``, ``data``, ``bench``, ``info``) inside the package.

The script's entry is :func:`fedkernels_cli.main.main`, which parses without importing torch and
then calls :func:`fedkernels.cli.dispatch.run_command`; ``fedkernels.cli.main`` is that same
function, for in-process callers (tests, notebooks). Each command lives in its own module here;
what a run executes lives in :mod:`fedkernels.experiments`.
"""

from fedkernels_cli.main import main
from fedkernels_cli.parser import parser

from .config import build_config, configure, demo_config, parse_option

__all__ = ["build_config", "configure", "demo_config", "main", "parse_option", "parser"]
