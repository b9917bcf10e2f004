"""The registered algorithms' names, read from the source of ``fedkernels.fl.algorithms`` without
importing it (that loads torch): the classes its ``__all__`` exports, each by the ``name`` its class
body sets, in the registry's order (FedAvg first, then by name). ``fedkernels info`` prints them;
python_tests/experiments/test_info_without_torch.py checks they are ``fedkernels.fl.registry``'s.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from .standalone import package_dir


@cache
def _parse(source: Path) -> ast.Module:
    """``source`` parsed, once: several exported classes share a file."""
    return ast.parse(source.read_text(encoding="utf-8"))


def _class_name_attr(source: Path, cls: str) -> str | None:
    """The string ``name = "..."`` set in the body of class ``cls`` in ``source``, or ``None``."""
    for node in _parse(source).body:
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for stmt in node.body:
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else target
            value = getattr(stmt, "value", None)
            if isinstance(target, ast.Name) and target.id == "name" and isinstance(value, ast.Constant):
                return value.value if isinstance(value.value, str) else None
    return None


def algorithm_names() -> list[str] | None:
    """The names ``fedkernels run --algorithms`` takes, or ``None`` where the source does not say them
    plainly (an export not imported from a sibling module, a class without its own ``name`` string)."""
    folder = package_dir() / "fl" / "algorithms"
    try:
        tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
        origin: dict[str, tuple[str, str]] = {}
        exported: list[str] = []
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                for alias in node.names:
                    origin[alias.asname or alias.name] = (node.module, alias.name)
            elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
                exported = list(ast.literal_eval(node.value))
        names: dict[str, str] = {}
        for attr in exported:
            if attr not in origin:
                return None
            module, cls = origin[attr]
            name = _class_name_attr(folder / f"{module.replace('.', '/')}.py", cls)
            if name is None:
                return None
            names[name.lower()] = name
    except (OSError, SyntaxError, ValueError):
        return None
    return [names[key] for key in sorted(names, key=lambda key: (names[key] != "FedAvg", key))]
