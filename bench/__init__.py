"""The benchmarks: op microbenchmarks in ``ops/``, federated experiments in ``fl/``, shared helpers in ``common.py``.

Each script runs from the repo root as ``python bench/ops/<name>.py`` (or ``fedkernels bench <name>``); the committed
tables the README and docs quote are in ``results/ops/`` and ``results/fl/``.
"""
