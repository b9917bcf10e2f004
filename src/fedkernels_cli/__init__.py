"""The ``fedkernels`` command (``run``, ``data``, ``bench``, ``info``), importable without torch.

The parser (:mod:`fedkernels_cli.parser`) is built from plain defaults (:mod:`fedkernels_cli.defaults`,
which :class:`fedkernels.experiments.ExperimentConfig` reads too), so ``--help`` and usage errors answer
at once; :func:`fedkernels_cli.main` (the script's entry, also for in-process callers: tests,
notebooks) imports each command's module only when it runs, and only the commands that need it
import ``fedkernels`` and torch. :mod:`fedkernels_cli.config` turns ``run``'s flags into an
:class:`~fedkernels.experiments.ExperimentConfig`; what a run executes lives in
:mod:`fedkernels.experiments`.
"""

from .main import main
from .parser import parser

__all__ = ["main", "parser"]
