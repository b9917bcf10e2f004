"""Launcher of the partial-weight-exchange benchmark (the body is bench/select_bench.py).

This file shares its name with the stdlib module ``select``, and every ``python bench/<x>.py`` puts
bench/ first on sys.path, so torch's ``import subprocess`` -> ``import select`` finds this file.
Imported under that name it therefore loads the real stdlib module in its place and does nothing
else; run as a script it runs the benchmark.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

if __name__ == "select":
    import importlib.machinery
    import importlib.util

    _path = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    _spec = importlib.machinery.PathFinder.find_spec("select", _path)
    _real = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_real)
    sys.modules["select"] = _real
elif __name__ == "__main__":
    import runpy

    runpy.run_path(os.path.join(_HERE, "select_bench.py"), run_name="__main__")
