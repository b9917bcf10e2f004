"""Every number the docs quote is backed by a committed result with its command.

Checked, in README.md, docs/ and bench/results/fl/paper/COMMANDS.md: every backticked path under
``bench/results/`` names a file or folder of the checkout; result folders are spelled with ``=`` and
brackets (``fraction=0.25``, ``hidden=[256,256]``), which test_links.py leaves out as templates, so
they are matched here component by component, and a template's placeholders (``<preset>``, or one
capital letter after ``=`` such as ``fraction=F``) must match at least one committed folder.

And in docs/experiments.md's two tables of the front page's rows ("Summary: the front page's rows",
"Every README row"): a row that quotes a preset's run (``--preset NAME``) needs that preset's folders
listed with their commands in COMMANDS.md; a row that quotes a bench script (``python -m bench.fl.X`` or
``bench/fl/X.py``)
needs its committed JSON (``bench/results/fl/X*.json``) or a cited path; the demo's row needs a cited
folder. A row may instead say "no committed folder", which the reader then sees.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT

RESULTS = ROOT / "bench" / "results"
COMMANDS = RESULTS / "fl" / "paper" / "COMMANDS.md"
EXPERIMENTS = ROOT / "docs" / "experiments.md"
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), COMMANDS])
CODE_SPAN = re.compile(r"`([^`\n]+)`")
RESULT_PATH = re.compile(r"(?<![\w/.-])(bench/results/[^\s`'\"]*)")
PLACEHOLDER = re.compile(r"<[^>/]+>|(?<==)[A-Z](?=$|-)")
UNBACKED = "no committed folder"
TABLES = ("## Summary: the front page's rows", "## Every README row")


def cited_paths(text: str) -> list[str]:
    """The ``bench/results/...`` paths inside the backticked spans of ``text`` (a trailing slash or
    sentence punctuation dropped)."""
    out = []
    for span in CODE_SPAN.findall(text):
        out += [p.rstrip("/.,;:)") for p in RESULT_PATH.findall(span)]
    return out


def component_pattern(part: str) -> re.Pattern[str] | None:
    """A path component as a regular expression where it holds placeholders or ``*`` globs, else None."""
    if re.fullmatch(r"[A-Z]", part):  # a whole component named by one capital, as `paper/P/...`
        return re.compile(r".+")
    marked = PLACEHOLDER.sub("\0", part).replace("*", "\1")
    if marked == part:
        return None
    pieces = re.split("([\0\1])", marked)
    return re.compile("".join(".+" if t == "\0" else ".*" if t == "\1" else re.escape(t) for t in pieces))


def matches(path: str) -> bool:
    """Whether ``path`` (relative to the checkout, placeholders and ``*`` allowed) names something that
    exists; a ``<name>`` placeholder may also stand for several folders (``bench/results/<name>.json``)."""
    if component_matches(path):
        return True
    if "<" not in path:
        return False
    whole = re.compile(".+".join(re.escape(t) for t in re.split(r"<[^>/]+>", path.strip("/"))))
    return any(whole.fullmatch(p.relative_to(ROOT).as_posix()) for p in RESULTS.rglob("*"))


def component_matches(path: str) -> bool:
    """:func:`matches`, one path component at a time."""
    found = [ROOT]
    for part in path.split("/"):
        if not part:
            continue
        pattern = component_pattern(part)
        if pattern is None:
            found = [f / part for f in found if (f / part).exists()]
        else:
            found = [c for f in found if f.is_dir() for c in f.iterdir() if pattern.fullmatch(c.name)]
        if not found:
            return False
    return True


def table_rows(text: str, heading: str) -> list[str]:
    """The body rows of the first table under ``heading`` (the header and separator rows left out)."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return rows[2:]


def preset_names(text: str) -> set[str]:
    """The presets ``text`` runs (``--preset NAME``)."""
    return set(re.findall(r"--preset ([\w-]+)", text))


def committed_presets() -> set[str]:
    """The presets COMMANDS.md gives folders and commands for: those it runs by name, and those it
    runs as ``--preset P`` whose own folder it names (its headings: ``## partial-rcv1-beta1, ...``)."""
    text = COMMANDS.read_text(encoding="utf-8")
    named = {
        p.name
        for p in (RESULTS / "fl" / "paper").iterdir()
        if p.is_dir() and re.search(rf"\b{re.escape(p.name)}\b", text)
    }
    return preset_names(text) | named


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_result_path_exists(doc: Path) -> None:
    missing = [p for p in cited_paths(doc.read_text(encoding="utf-8")) if not matches(p)]
    assert not missing, f"{doc.relative_to(ROOT)} cites result paths that are not committed: {missing}"


@pytest.mark.parametrize("heading", TABLES)
def test_every_row_of_the_front_page_tables_is_backed(heading: str) -> None:
    text = EXPERIMENTS.read_text(encoding="utf-8")
    committed = committed_presets()
    rows = table_rows(text, heading)
    assert rows, f"no table under {heading!r}"
    unbacked = []
    for row in rows:
        if UNBACKED in row:
            continue
        paths = [p for p in cited_paths(row) if matches(p)]
        presets = preset_names(row)
        benches = set(re.findall(r"(?:python -m bench\.fl\.|bench/fl/)(\w+)", row))
        why = [f"preset {p} has no folder in COMMANDS.md" for p in sorted(presets - committed)]
        why += [
            f"bench {b} has no committed JSON"
            for b in sorted(benches)
            if not paths and not list((RESULTS / "fl").glob(f"{b}*.json"))
        ]
        if "--demo" in row and not paths:
            why.append("the demo cites no folder")
        if not (paths or presets or benches or "--demo" in row):
            why.append("no command or result cited")
        if why:
            unbacked.append(f"{row[:70]}...: {'; '.join(why)}")
    assert not unbacked, "rows whose numbers no committed result backs:\n" + "\n".join(unbacked)


def test_the_checker_catches_a_missing_folder() -> None:
    assert matches("bench/results/fl/paper/COMMANDS.md")
    assert matches("bench/results/fl/paper/<preset>")
    assert not matches("bench/results/fl/paper/no-such-preset/fraction=0.25")
    assert not matches("bench/results/fl/paper/<preset>/no-such-variant=F")
    assert matches("bench/results/fl/paper/P/threshold=1e9") and matches("bench/results/fl/fl_*.json")
    assert matches("bench/results/<name>.json") and not matches("bench/results/<name>.nothing")
    assert matches("bench/results/fl/paper/fedmlh-bibtex/hidden=[256,256]-partition=dirichlet-beta=B")
    assert cited_paths("folder `bench/results/fl/paper/x/fraction=0.25`, and `bench/results/y/`.") == [
        "bench/results/fl/paper/x/fraction=0.25",
        "bench/results/y",
    ]
