"""The docs hold together: docs/index.md links every page under docs/, and no link or mention in the
README, the CHANGELOG, docs/ or a source comment points to a file a clone of the repository does not have.

Checked: every relative markdown link; every ``*.md`` name written anywhere in those files (a page
renamed or moved leaves such mentions behind); every backticked path under a top-level folder of
the repository (``src/...``, ``bench/...``). A bare name (``seeds.md``) passes when some file of the
repository has that name; templates and globs (``bench/<name>.py``, ``fl_*.json``) are not paths.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT

DOCS = ROOT / "docs"
MARKDOWN = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.rglob("*.md")])
FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", flags=re.I)  # http:, https:, mailto:, ...
# A markdown file's name or path anywhere in a text (not part of a longer word or path).
MD_MENTION = re.compile(r"(?<![\w/.~-])((?:\.\.?/)*(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.md)(?![\w/])")
CODE_SPAN = re.compile(r"`([^`\s]+)`")
NOT_A_PATH = set("<>*{}$[]()=,;:|'\"")  # templates, globs, shell and Python syntax
PATH_SUFFIXES = {".md", ".py", ".json", ".toml", ".yml", ".cff", ".cpp", ".h", ".cu", ".cuh", ".cmake", ".sh", ".txt"}
# Folders a clone has only after a build or a run, and this test's own examples of bad links.
UNTRACKED = {".git", ".venv", ".venv-cuda", "build", "site", "fedkernels-demo", "gpu-check", "__pycache__"}
SOURCE_DIRS = ["src", "csrc", "python_tests", "tools", "bench", "cmake", "examples", "baselines", ".ci"]
SOURCE_FILES = ["Makefile", "mkdocs.yml", "pyproject.toml", "CITATION.cff", "CMakeLists.txt"]
SOURCE_SUFFIXES = {".py", ".cpp", ".h", ".cu", ".cuh", ".cmake", ".sh", ".toml", ""}


def repo_files() -> list[Path]:
    """Every file of the checkout, without build outputs, virtual environments or run outputs."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in UNTRACKED and not d.startswith(".venv")]
        found += [Path(folder) / f for f in files]
    return found


FILE_NAMES = {p.name for p in repo_files()}


def local_links(md: Path) -> list[str]:
    """The targets of the markdown links in ``md`` that name a file (no URL, no bare #anchor),
    outside code blocks and inline code."""
    text = INLINE_CODE.sub("", FENCE.sub("", md.read_text(encoding="utf-8")))
    return [t for t in LINK.findall(text) if not EXTERNAL.match(t) and not t.startswith("#")]


def target(md: Path, link: str) -> Path:
    return (md.parent / link.split("#", 1)[0]).resolve()


@pytest.mark.parametrize("md", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_links_stay_in_the_repo_and_exist(md):
    bad = []
    for link in local_links(md):
        path = target(md, link)
        if not path.is_relative_to(ROOT):
            bad.append(f"{link} (outside the repository)")
        elif not path.exists():
            bad.append(f"{link} (no such file)")
    assert not bad, f"{md.relative_to(ROOT)}: {bad}"


def test_index_links_every_docs_page():
    index = DOCS / "index.md"
    linked = {target(index, link) for link in local_links(index)}
    pages = {p.resolve() for p in DOCS.rglob("*.md") if p.resolve() != index.resolve()}
    missing = sorted(str(p.relative_to(DOCS)) for p in pages - linked)
    assert not missing, f"docs/index.md does not link: {missing}"


def test_link_checks_see_bad_links(tmp_path):
    # The parser must find links (and skip code), or the tests above could pass on nothing.
    md = tmp_path / "x.md"
    md.write_text(
        "[a](../shared/DESIGN.md) ![b](img.png#x) [c](https://e.org) [d](#here)\n"
        "`[e](in-code.md)`\n```\n[f](in-fence.md)\n```\n",
        encoding="utf-8",
    )
    assert local_links(md) == ["../shared/DESIGN.md", "img.png#x"]
    assert len(local_links(ROOT / "README.md")) >= 5


def test_mkdocs_nav_lists_every_docs_page():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert [p for p in pages if f": {p}" not in nav] == []


def resolves(base: Path, mention: str) -> bool:
    """A mention names a file relative to its own folder, the repository root or docs/ (mkdocs.yml), or (a bare name)
    some file of the repository."""
    mention = mention.split("#", 1)[0]
    if "/" not in mention:
        return mention in FILE_NAMES
    return any((b / mention).exists() for b in (base, ROOT, DOCS))


def stale_mentions(path: Path) -> list[str]:
    """The ``*.md`` mentions, and (in markdown) backticked repository paths, that name nothing."""
    text = path.read_text(encoding="utf-8", errors="replace")
    bad = {m for m in MD_MENTION.findall(text) if not resolves(path.parent, m)}
    if path.suffix == ".md":
        top = {p.name for p in ROOT.iterdir()} - UNTRACKED
        for m in CODE_SPAN.findall(text):
            if NOT_A_PATH & set(m) or "/" not in m or m.startswith(("/", "~", "-")):
                continue
            first = m.removeprefix("./").split("/", 1)[0]
            suffix = Path(m.rstrip("/")).suffix
            if first in top and (m.endswith("/") or suffix in PATH_SUFFIXES) and not resolves(path.parent, m):
                bad.add(m)
    return sorted(bad)


@pytest.mark.parametrize("md", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_mentions_in_docs_name_files_that_exist(md):
    bad = stale_mentions(md)
    assert not bad, f"{md.relative_to(ROOT)} mentions files the repository does not have: {bad}"


def source_files() -> list[Path]:
    files = [ROOT / f for f in SOURCE_FILES if (ROOT / f).exists()]
    for d in SOURCE_DIRS:
        files += [p for p in repo_files() if p.is_relative_to(ROOT / d) and p.suffix in SOURCE_SUFFIXES]
    return sorted(p for p in set(files) if p != Path(__file__).resolve())


def test_comments_and_docstrings_name_docs_that_exist():
    # "see DESIGN.md" in a comment is a dead end when the page is docs/design.md.
    bad = [f"{p.relative_to(ROOT)}: {stale_mentions(p)}" for p in source_files() if stale_mentions(p)]
    assert not bad, "\n".join(bad)


def test_mention_checks_see_stale_mentions(tmp_path):
    md = tmp_path / "x.md"
    md.write_text(
        "See DESIGN.md and docs/gone.md; `src/fedkernels/nope.py`, `bench/<name>.py`, `docs/index.md`.\n",
        encoding="utf-8",
    )
    assert stale_mentions(md) == ["DESIGN.md", "docs/gone.md", "src/fedkernels/nope.py"]


def test_no_machine_paths_in_docs_or_docstrings():
    # The API reference renders src/ docstrings: a path of one machine (a doctest reading
    # /work/shared/...) is a dead end for every reader.
    machine = re.compile(r"(?<![\w.~-])/(?:work|root|home/\w+)/")
    texts = [*MARKDOWN, *(p for p in repo_files() if p.is_relative_to(ROOT / "src") and p.suffix == ".py")]
    bad = [str(p.relative_to(ROOT)) for p in texts if machine.search(p.read_text(encoding="utf-8"))]
    assert not bad, f"machine paths in {bad}"
