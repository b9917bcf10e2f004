"""Imports in src/fedkernels point one way: down the layers of docs/developing.md.

Every module's imports are read with ``ast`` (module-level, inside functions, and under
``TYPE_CHECKING`` alike) and resolved to the fedkernels module they name; an import of a module in a
higher layer fails the test. Modules of the same layer may import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fedkernels"

# From the bottom. A module belongs to the layer of its longest matching prefix (dotted, under fedkernels).
LAYERS: list[tuple[str, ...]] = [
    ("_C", "_validate", "_info", "_files", "_suggest"),  # the compiled extension and its helpers
    (
        "ops",
        "hashing",
        "comm",
        "metrics",
        "solvers",
        "seeding",
        "sparse_rows",
    ),  # registered-op wrappers and what sits beside them
    ("nn",),
    ("data",),
    ("fl",),
    ("integrations", "cli", "testing", ""),  # "" is the package root (it imports everything)
]


def layer_of(module: str) -> int:
    """Layer index of a dotted module name relative to fedkernels ('' for the package root)."""
    best, best_len = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (p == "" or module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    assert best is not None, module
    return best


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module relative to fedkernels)`` for every fedkernels import in the file."""
    me = module_name(path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    if me == "":
        package = []
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "fedkernels" or alias.name.startswith("fedkernels."):
                    out.append((node.lineno, alias.name.removeprefix("fedkernels").lstrip(".")))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if node.module is None or not (node.module == "fedkernels" or node.module.startswith("fedkernels.")):
                    continue
                base = node.module.removeprefix("fedkernels").lstrip(".").split(".") if node.module else []
                base = [b for b in base if b]
            else:
                up = node.level - 1
                base = package[: len(package) - up] if up else list(package)
                if node.module:
                    base = base + node.module.split(".")
            for alias in node.names:
                # "from . import x": x may be a submodule; judge it by the most specific name
                candidate = ".".join([*base, alias.name])
                target = candidate if _is_module(candidate) else ".".join(base)
                out.append((node.lineno, target))
    return out


def _is_module(dotted: str) -> bool:
    if not dotted:
        return False
    p = SRC.joinpath(*dotted.split("."))
    # the compiled _C is known by its stub (_C.pyi): a clean checkout has no built .so in src/
    return any(p.with_suffix(s).exists() for s in (".py", ".pyi")) or (p / "__init__.py").exists()


def all_modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def upward_imports() -> list[str]:
    bad = []
    for path in all_modules():
        me = module_name(path)
        for line, target in imported_modules(path):
            if layer_of(target) > layer_of(me):
                bad.append(
                    f"{path.relative_to(SRC.parent)}:{line}: fedkernels.{me or '<root>'} (layer {layer_of(me)}) "
                    f"imports fedkernels.{target or '<root>'} (layer {layer_of(target)})"
                )
    return bad


def test_no_import_runs_up_the_layers() -> None:
    bad = upward_imports()
    assert not bad, "imports that run up the layers:\n" + "\n".join(bad)


def test_every_module_has_a_layer() -> None:
    assert len(all_modules()) > 40
    for path in all_modules():
        layer_of(module_name(path))  # asserts


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ..fl.types import ClientData\n", ["fl.types"]),
        ("from fedkernels.fl import Server\n", ["fl"]),
        ("import fedkernels\n", [""]),
        ("def f():\n    from ... import nn\n", ["nn"]),
        ("from .feature_hashing import hash_features\n", ["data.feature_hashing"]),
    ],
)
def test_import_resolution(tmp_path_factory, monkeypatch, source: str, expected: list[str]) -> None:
    """The resolver on a module placed at fedkernels/data/x.py: relative, absolute, lazy imports."""
    root = tmp_path_factory.mktemp("pkg") / "fedkernels"
    (root / "data").mkdir(parents=True)
    for sub in ("fl", "nn"):
        (root / sub).mkdir()
        (root / sub / "__init__.py").write_text("")
    (root / "fl" / "types.py").write_text("")
    (root / "data" / "feature_hashing.py").write_text("")
    (root / "data" / "x.py").write_text(source)
    monkeypatch.setitem(globals(), "SRC", root)
    got = [t for _, t in imported_modules(root / "data" / "x.py")]
    assert got == expected


def test_an_upward_import_is_caught(tmp_path, monkeypatch) -> None:
    root = tmp_path / "fedkernels"
    (root / "ops").mkdir(parents=True)
    (root / "fl").mkdir()
    (root / "fl" / "__init__.py").write_text("")
    (root / "ops" / "bad.py").write_text("from ..fl import Server\n")
    monkeypatch.setitem(globals(), "SRC", root)
    assert len(upward_imports()) == 1


def test_one_import_path_per_concept() -> None:
    """Every algorithm is a name of fedkernels.fl (the same object as in fl.algorithms); metrics has
    an __all__ naming only its public functions; ClientData is one class wherever it is imported."""
    import fedkernels
    import fedkernels.data
    import fedkernels.fl
    import fedkernels.fl.algorithms as algorithms
    import fedkernels.metrics as metrics

    for name in algorithms.__all__:
        assert name in fedkernels.fl.__all__ and getattr(fedkernels.fl, name) is getattr(algorithms, name)
    assert fedkernels.fl.ClientData is fedkernels.data.ClientData
    public = {
        n
        for n, v in vars(metrics).items()
        if callable(v) and not n.startswith("_") and v.__module__ == metrics.__name__
    }
    assert set(metrics.__all__) == public
    for module in (fedkernels, fedkernels.fl, fedkernels.data, metrics):
        assert all(hasattr(module, n) for n in module.__all__), module.__name__


def test_no_script_shadows_a_stdlib_module() -> None:
    """``python bench/ops/x.py`` puts bench/ops/ first on sys.path: a bench/ops/select.py would replace the stdlib's."""
    import sys

    root = SRC.parents[1]
    for folder in ("bench", "emu", "tools", "examples"):
        for path in (root / folder).rglob("*.py"):
            assert path.stem not in sys.stdlib_module_names, path
