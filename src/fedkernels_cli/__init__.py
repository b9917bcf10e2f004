"""The ``fedkernels`` command's front door, importable without torch.

``fedkernels --help`` and argparse's usage errors answer from here alone: the parser
(:mod:`fedkernels_cli.parser`) is built from plain defaults (:mod:`fedkernels_cli.defaults`, which
:class:`fedkernels.experiments.ExperimentConfig` reads too), and :func:`fedkernels_cli.main.main`
imports ``fedkernels`` (and so torch) only to run the command it parsed.
"""
