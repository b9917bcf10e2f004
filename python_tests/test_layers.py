"""Imports in src/fedkernels point one way: down the layers of docs/developing.md; and the wings
beside the package stay apart: bench/ never imports python_tests/ nor the other way round, and no
wing (python_tests/, bench/, emu/, tools/) edits ``sys.path`` (a script finds its siblings because
Python puts its folder on the path, a bench or a tool that imports the root's packages runs with
``python -m`` from the root; a test loads a script by file with python_tests/support/scripts.py). The
checkout-only wings emu/, bench/ and tools/ import one way: down :data:`WING_ORDER`.

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
    # the compiled extension and its helpers
    ("_C", "_validate", "_info", "_build_facts", "_files", "_suggest", "_memory"),
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


def test_the_package_imports_only_the_clis_defaults() -> None:
    """src/fedkernels_cli (the one CLI package) sits above fedkernels; the package reads only its
    torch-free run defaults (``ExperimentConfig``'s field defaults are the parser's)."""
    bad = []
    for path in all_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                if name.split(".")[0] == "fedkernels_cli" and name != "fedkernels_cli.defaults":
                    bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: imports {name}")
    assert not bad, "\n".join(bad)


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
    """A script run by its path (a tool, an example, a bench's faiss worker) has its folder first on sys.path:
    a bench/ops/select.py would replace the stdlib's there."""
    import sys

    root = SRC.parents[1]
    for folder in ("bench", "emu", "tools", "examples"):
        for path in (root / folder).rglob("*.py"):
            assert path.stem not in sys.stdlib_module_names, path


# ---- the wings: bench/ and python_tests/ import nothing of each other and leave sys.path alone

ROOT = SRC.parents[1]
WINGS = ("bench", "python_tests")
# calls on sys.path that only read it
_READS = {"index", "count", "copy", "__contains__", "__iter__", "__len__", "__getitem__"}


def wing_files(root: Path, wing: str) -> list[Path]:
    """The Python files of a wing (bench/results holds data, not code)."""
    return sorted(p for p in (root / wing).rglob("*.py") if "__pycache__" not in p.parts and "results" not in p.parts)


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _names_sys_path(args: list[ast.expr]) -> bool:
    """``setattr(sys, "path", ...)`` / ``monkeypatch.setattr(sys, "path", ...)`` / ``("sys.path", ...)``."""
    consts = [a.value for a in args if isinstance(a, ast.Constant)]
    return "sys.path" in consts or (
        len(args) >= 2 and isinstance(args[0], ast.Name) and args[0].id == "sys" and consts[:1] == ["path"]
    )


def sys_path_edits(path: Path) -> list[str]:
    """``file:line: what`` for every statement of the file that changes ``sys.path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        what = None
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and _is_sys_path(f.value) and f.attr not in _READS:
                what = f"sys.path.{f.attr}()"
            elif isinstance(f, ast.Attribute) and f.attr in ("syspath_prepend", "addsitedir"):
                what = f"{f.attr}()"
            elif (
                (isinstance(f, ast.Name) and f.id == "setattr")
                or (isinstance(f, ast.Attribute) and f.attr == "setattr")
            ) and _names_sys_path(node.args):
                what = "setattr of sys.path"
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                inner = target.value if isinstance(target, ast.Subscript) else target
                if _is_sys_path(inner):
                    what = "assignment to sys.path"
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            what = "from sys import path"
        if what:
            found.append(f"{path}:{node.lineno}: {what}")
    return found


def top_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, first name)`` of every absolute import in the file (``import a.b`` / ``from a.b import c``: a)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def cross_wing_imports(root: Path) -> list[str]:
    """Imports of bench/ from python_tests/ (the package ``bench`` or a script's bare name, as a test
    with bench/ on its path would write it) and of python_tests from bench/."""
    bench_names = {"bench"} | {p.stem for p in wing_files(root, "bench")}
    forbidden = {"python_tests": bench_names, "bench": {"python_tests"}}
    bad = []
    for wing in WINGS:
        for path in wing_files(root, wing):
            for line, name in top_level_imports(path):
                if name in forbidden[wing]:
                    bad.append(f"{path.relative_to(root)}:{line}: {wing}/ imports {name}")
    return bad


def test_no_wing_edits_sys_path() -> None:
    """Benches and the tools that import the root's packages run as modules of the repo root
    (``python -m bench.ops.x``, ``python -m tools.gpu.gpu_check``), tests load scripts through
    python_tests/support/scripts.py, and emu/'s scripts import their siblings bare when run by path
    (relatively when imported as ``emu.x``): none edits ``sys.path``, no file excepted."""
    bad = [e for wing in (*WINGS, "emu", "tools") for path in wing_files(ROOT, wing) for e in sys_path_edits(path)]
    assert not bad, (
        "sys.path edits (run a bench or a tool with python -m; load a script with python_tests/support/scripts.py):\n"
        + "\n".join(bad)
    )


def bare_sibling_imports(root: Path) -> list[str]:
    """``file:line: module`` for each ``import peers`` / ``from common import ...`` in a bench module: under
    ``python -m bench.ops.x`` only ``bench.ops.peers`` imports (the faiss workers run as scripts: exempt)."""
    siblings = {p.stem for p in wing_files(root, "bench")}
    bad = []
    for path in wing_files(root, "bench"):
        if path.stem.endswith("_worker"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bad += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in siblings]
    return bad


def test_bench_modules_import_siblings_through_the_package() -> None:
    bad = bare_sibling_imports(ROOT)
    assert not bad, "bare sibling imports (write bench.ops.x / bench.common):\n" + "\n".join(bad)


def test_a_bare_sibling_import_is_caught(tmp_path) -> None:
    (tmp_path / "bench" / "ops").mkdir(parents=True)
    (tmp_path / "bench" / "common.py").write_text("")
    (tmp_path / "bench" / "ops" / "x.py").write_text("def f():\n    from common import y\n")
    assert bare_sibling_imports(tmp_path) == ["bench/ops/x.py:2: common"]


def test_bench_and_tests_do_not_import_each_other() -> None:
    bad = cross_wing_imports(ROOT)
    assert not bad, "imports across bench/ and python_tests/:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source",
    [
        "import sys\nsys.path.insert(0, 'x')\n",
        "import sys\ndef f():\n    sys.path.append('x')\n",
        "import sys\nsys.path[:] = ['x']\n",
        "import sys\nsys.path += ['x']\n",
        "def test(monkeypatch):\n    monkeypatch.syspath_prepend('x')\n",
        "import sys\ndef test(monkeypatch):\n    monkeypatch.setattr(sys, 'path', [])\n",
        "import site\nsite.addsitedir('x')\n",
        "from sys import path\n",
    ],
)
def test_a_sys_path_edit_is_caught(tmp_path, source: str) -> None:
    (tmp_path / "x.py").write_text(source)
    assert len(sys_path_edits(tmp_path / "x.py")) == 1


def test_reading_sys_path_is_not_an_edit(tmp_path) -> None:
    (tmp_path / "x.py").write_text("import sys\nok = 'x' in sys.path and sys.path.index('x') == 0\n")
    assert sys_path_edits(tmp_path / "x.py") == []


@pytest.mark.parametrize(
    ("wing", "source"),
    [
        ("python_tests", "import common\n"),
        ("python_tests", "def f():\n    from bench.common import timeit\n"),
        ("bench", "from python_tests.support.fl_data import tiny_clients\n"),
        ("bench", "import python_tests.support\n"),
    ],
)
def test_a_cross_wing_import_is_caught(tmp_path, wing: str, source: str) -> None:
    for w in WINGS:
        (tmp_path / w).mkdir()
    (tmp_path / "bench" / "common.py").write_text("")
    (tmp_path / wing / "x.py").write_text(source)
    assert len(cross_wing_imports(tmp_path)) == 1


# ---- the checkout-only wings emu/, bench/ and tools/ import one way: down this list, never up it

# From the bottom: emu/ (the CUDA emulator and its launch model) imports no other wing; bench/ may import
# emu/ (bench/ops/gpu_model.py runs the model); tools/ may import both (gpu-check runs the benches and the
# emulator's op test list). Nothing imports tools/. A helper two wings share lives in the lower one.
WING_ORDER = ("emu", "bench", "tools")


def imported_top_names(path: Path) -> list[tuple[int, str]]:
    """``(line, first name)`` of every absolute import of the file, module-level or inside a function, and of
    every ``importlib.import_module("a.b")`` / ``__import__("a.b")`` with a constant name."""
    out = top_level_imports(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                out.append((node.lineno, node.args[0].value.split(".")[0]))
    return out


def upward_wing_imports(root: Path) -> list[str]:
    """``file:line: ...`` for every import of a wing by a wing below it in :data:`WING_ORDER`."""
    rank = {w: i for i, w in enumerate(WING_ORDER)}
    bad = []
    for wing in WING_ORDER:
        for path in wing_files(root, wing):
            for line, name in imported_top_names(path):
                if rank.get(name, -1) > rank[wing]:
                    bad.append(f"{path.relative_to(root)}:{line}: {wing}/ imports {name}/ (above it)")
    return bad


def test_wings_import_one_way() -> None:
    bad = upward_wing_imports(ROOT)
    assert not bad, (
        f"imports that run up the wings {' < '.join(WING_ORDER)} (move the shared code to the lower wing):\n"
        + "\n".join(bad)
    )


@pytest.mark.parametrize(
    ("wing", "source", "caught"),
    [
        # the imports of the layout before issue 46, one of each kind
        ("emu", "from bench import common as bench_common\n", True),
        ("emu", "from bench.ops.select_shapes import resnet50_shapes\n", True),
        ("emu", "def main():\n    from tools.ci import test_shards\n", True),
        ("bench", "def f():\n    import tools.gpu.gpu_probe\n", True),
        ("emu", "import importlib\nm = importlib.import_module('bench.common')\n", True),
        ("bench", "m = __import__('tools')\n", True),
        # downward and same-wing imports are fine
        ("bench", "from emu.gpu_model.common import SMS\n", False),
        ("tools", "from emu.emulate import op_test_files\nfrom bench.common import copy_bandwidth_gbs\n", False),
        ("tools", "from tools.gpu import gpu_check_report\n", False),
        ("emu", "from . import test_shards\nimport rewrite\n", False),
    ],
)
def test_an_upward_wing_import_is_caught(tmp_path, wing: str, source: str, caught: bool) -> None:
    for w in WING_ORDER:
        (tmp_path / w / "sub").mkdir(parents=True)
    (tmp_path / wing / "sub" / "x.py").write_text(source)
    assert len(upward_wing_imports(tmp_path)) == int(caught)
