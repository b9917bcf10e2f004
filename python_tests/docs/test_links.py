"""The docs hold together: docs/index.md links every page under docs/, and no markdown link in the
README, the CHANGELOG or docs/ points to a file a clone of the repository does not have."""

from __future__ import annotations

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
