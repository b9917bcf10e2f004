"""The API reference covers every public name: each name in a public module's ``__all__`` has a
``::: module.name`` entry on some page of docs/reference/, and every entry names something that exists.

mkdocs is not needed here: the pages are read as text (``make docs`` renders them, in CI)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT

PAGES = sorted((ROOT / "docs" / "reference").glob("*.md"))
PUBLIC_MODULES = [
    "fedkernels",
    "fedkernels.nn",
    "fedkernels.fl",
    "fedkernels.experiments",
    "fedkernels.data",
    "fedkernels.comm",
    "fedkernels.metrics",
]
DIRECTIVE = re.compile(r"^:::\s+(\S+)\s*$", flags=re.M)


def documented() -> dict[str, Path]:
    """Every ``::: dotted.path`` entry of the reference pages -> the page it is on."""
    found: dict[str, Path] = {}
    for page in PAGES:
        for path in DIRECTIVE.findall(page.read_text(encoding="utf-8")):
            found.setdefault(path, page)
    return found


def public_names(module_name: str) -> list[str]:
    """``__all__``, or (for a module without one) the functions and classes it defines."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and obj.__module__ == module_name
    ]


def resolve(path: str) -> object:
    """Import the longest module prefix of ``path`` and look the rest up as attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)  # AttributeError: the entry names nothing
        return obj
    raise ImportError(f"no module in {path!r}")


def resolve_quietly(path: str) -> object:
    try:
        return resolve(path)
    except (ImportError, AttributeError):
        return None


def test_reference_pages_exist():
    assert PAGES, "docs/reference/*.md is missing"
    assert documented(), "the reference pages have no ::: entries"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_public_name_has_a_reference_entry(module_name):
    entries = documented()
    names = public_names(module_name)
    assert names, f"{module_name} exports nothing"
    module = importlib.import_module(module_name)
    # A class or function documented under the path that defines it (fedkernels.fl.algorithms.FedSS
    # for fedkernels.fl.FedSS) counts: the page shows the same object.
    same_object = {id(obj) for obj in map(resolve_quietly, entries) if inspect.isclass(obj) or inspect.isroutine(obj)}
    missing = [
        f"::: {module_name}.{name}"
        for name in names
        if f"{module_name}.{name}" not in entries and id(getattr(module, name, None)) not in same_object
    ]
    assert not missing, f"add these lines to a page of docs/reference/: {missing}"


def test_every_reference_entry_exists():
    broken = []
    for path, page in documented().items():
        try:
            resolve(path)
        except (ImportError, AttributeError) as exc:
            broken.append(f"{page.name}: ::: {path} ({exc})")
    assert not broken, broken


def test_every_reference_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert [p.name for p in PAGES if f"reference/{p.name}" not in nav] == []


def test_the_checks_catch_a_missing_name(tmp_path, monkeypatch):
    # The coverage check must fail for a page set that leaves a public name out.
    page = tmp_path / "nn.md"
    page.write_text("::: fedkernels.nn.FedMLHHead\n", encoding="utf-8")
    monkeypatch.setitem(globals(), "PAGES", [page])
    with pytest.raises(AssertionError, match="SampledSoftmaxHead"):
        test_every_public_name_has_a_reference_entry("fedkernels.nn")
    page.write_text("::: fedkernels.nn.NoSuchHead\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="NoSuchHead"):
        test_every_reference_entry_exists()


def test_mkdocs_hook_drops_sphinx_roles():
    # Docstrings write :func:`x`; the hook in mkdocs.yml removes the role from the rendered page.
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "tools" / "dev" / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    html = "see :func:<code>read_xc</code> and :class:<code>XCData</code>; a ratio 1:2 stays"
    assert hooks.on_page_content(html) == "see <code>read_xc</code> and <code>XCData</code>; a ratio 1:2 stays"
    assert "tools/dev/mkdocs_hooks.py" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
