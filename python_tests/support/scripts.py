"""Import a script of bench/ or tools/ as a module, as ``python bench/x.py`` would find it.

A script imports its siblings by bare name (``import common``) because Python puts the script's own
folder first on ``sys.path``. Tests never edit ``sys.path`` (python_tests/test_layers.py): instead,
:func:`load_script` loads the siblings a script imports from their files first, under those bare
names, then the script itself.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def sibling_imports(path: Path) -> list[str]:
    """Bare names the script at ``path`` imports (anywhere in it) that are files beside it."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = [node.module]
        else:
            continue
        names += [n for n in found if "." not in n and (path.parent / f"{n}.py").is_file()]
    return list(dict.fromkeys(names))


def load_script(path: Path) -> ModuleType:
    """The module of the script at ``path`` (registered as ``sys.modules[path.stem]``), with the
    siblings it imports loaded first. A name already imported from another file is an error, not a
    silent mix of two modules."""
    path = path.resolve()
    name = path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if Path(getattr(loaded, "__file__", "") or "").resolve() != path:
            raise ImportError(f"{name} is already imported from {loaded.__file__}, not {path}")
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before the siblings: an import cycle finds it, as a normal import would
    try:
        for sibling in sibling_imports(path):
            if sibling != name:
                load_script(path.parent / f"{sibling}.py")
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
