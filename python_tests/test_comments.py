"""No measured number in a code comment: a timing, speed-up or accuracy figure in a comment or docstring goes
stale the day the code, the machine or the data changes. Comments say why; the numbers live in docs/ and
bench/results/, where they are dated and regenerated.

The check reads the comments and docstrings of the tracked code files (src/, csrc/, emu/, bench/ but not
bench/results/, tools/, python_tests/, examples/, baselines/, cmake/, CMakeLists.txt, the Makefile and
.ci/run) and fails on the shapes a measurement takes (:data:`MEASURED`: an approximate ratio, a speed-up,
an accuracy figure, a duration or a share of CPU or CI time, a cost per item, an approximate bandwidth).
Specifications (constants, limits, defaults, sizes a formula gives, a paper's reported results) do not
take these shapes and pass.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCOPE = ("src", "csrc", "emu", "bench", "tools", "python_tests", "examples", "baselines", "cmake")
SCOPE_FILES = ("CMakeLists.txt", "Makefile", ".ci/run")  # read with the # comments of HASH
PY = (".py", ".pyi")
C_LIKE = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
HASH = (".sh", ".cmake", ".toml")

_TIME = r"(?:ns|us|µs|ms|s|sec|seconds|min|minutes|hours?)"
MEASURED = [
    (re.compile(r"~\s?\d[\d.,]*\s?(?:x|%)(?!\w)"), "an approximate ratio (~4.8x, ~15%)"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?:x|%) (?:faster|slower|quicker)\b"), "a speed-up (5x slower)"),
    (re.compile(r"\bP@\d+ (?:of )?[01]?\.\d"), "an accuracy figure (P@1 0.175)"),
    (re.compile(rf"\b\d+(?:\.\d+)?\s?{_TIME} of (?:CPU|CI|wall)"), "a cost in time (20 s of CPU)"),
    (re.compile(r"\bof CI's \d+"), "a share of CI's time"),
    (re.compile(rf"~\s?\d[\d.,]*\s?{_TIME}\b"), "an approximate duration (~30 ms)"),
    (re.compile(r"\babout \d[\d.]*(?:-\d[\d.]*)?\s?(?:s|sec|seconds|min|minutes|hours?)\b"), "a duration (about 2 s)"),
    (re.compile(r"\b\d[\d.]*\s?(?:ns|us|µs) (?:per|a|each)\b"), "a cost per item (20 ns per value)"),
    (re.compile(r"(?:about|~)\s?\d[\d.]*(?:-\d[\d.]*)?\s?[GMT]B/s"), "a bandwidth (about 1.5 GB/s)"),
]
# "file: text" of comments that match a pattern but state no measurement (keep it short; say why).
ALLOWED: set[str] = set()


def code_files(root: Path = ROOT) -> list[Path]:
    """The tracked files in scope whose comments the check reads."""
    listed = subprocess.run(
        ["git", "ls-files", *SCOPE, *SCOPE_FILES], cwd=root, capture_output=True, text=True, check=True
    ).stdout
    files = []
    for name in listed.split():
        if name.startswith("bench/results/"):
            continue
        if name.endswith(PY + C_LIKE + HASH) or name in SCOPE_FILES:
            files.append(root / name)
    return files


def comments(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every comment line of the file, and of every docstring line of a Python file."""
    text = path.read_text(errors="replace")
    if path.suffix in PY:
        out = [
            (tok.start[0], tok.string)
            for tok in tokenize.generate_tokens(io.StringIO(text).readline)
            if tok.type == tokenize.COMMENT
        ]
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc is not None:
                    first = node.body[0].lineno
                    out += [(first + i, line) for i, line in enumerate(doc.splitlines())]
        return out
    if path.suffix in C_LIKE:
        out = []
        for m in re.finditer(r"//[^\n]*|/\*.*?\*/", text, re.S):
            first = text.count("\n", 0, m.start()) + 1
            out += [(first + i, line) for i, line in enumerate(m.group().splitlines())]
        return out
    return [(i + 1, line[line.index("#") :]) for i, line in enumerate(text.splitlines()) if "#" in line]


def measured_numbers(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line: what: text`` for every comment line that carries a measurement's shape."""
    bad = []
    for path in paths:
        rel = path.relative_to(root).as_posix()
        for line, text in comments(path):
            for pattern, what in MEASURED:
                if pattern.search(text) and f"{rel}: {text.strip()}" not in ALLOWED:
                    bad.append(f"{rel}:{line}: {what}: {text.strip()}")
                    break
    return bad


def test_no_measured_number_in_a_code_comment() -> None:
    files = code_files()
    assert len(files) > 500, "the check found too few code files: is this a git checkout?"
    bad = measured_numbers(files)
    assert not bad, (
        "measured numbers in code comments (say why without the number; numbers go in docs/ or bench/results):\n"
        + "\n".join(bad)
    )


@pytest.mark.parametrize(
    ("name", "source"),
    [
        # comments of the tree before issue 46, one of each shape
        ("server.py", "x = 1  # partial exchange; ~4.8x a Bibtex round on the CPU\n"),
        ("x.py", "def f():\n    '''A record as JSON values (deep copies: 10x faster).'''\n"),
        ("defaults.py", "# (Bibtex, 12 rounds: FedAvg P@1 0.020 with a 256-wide layer)\n"),
        ("Makefile", "# an unreachable extra index costs pip about 10 s of retries for every package.\n"),
        ("run", "# op suite a second time in random order cost ~8 min of CI's 60.)\n"),
        ("prox_cpu.cpp", "// the scalar loop runs ~15% faster with VEX encoding.\n"),
        ("tv1d.h", "/* lam 0.1: 89%, 20% faster */\nint x;\n"),
        ("select.cpp", "int x;  // c10::Half's scalar conversion costs ~20 ns per value\n"),
        ("widen.cpp", "// the conversion costs 20 ns per value\n"),
        ("crc32.h", "// eight table lookups per 8 input bytes (about 1-2 GB/s);\n"),
        ("sanitize.sh", "# a lint run is ~20 s of CPU\n"),
        ("preset.toml", "# each round's 159 clients in one batched pass (4.8x faster here)\n"),
    ],
)
def test_a_measured_number_is_caught(tmp_path, name: str, source: str) -> None:
    (tmp_path / name).write_text(source)
    assert len(measured_numbers([tmp_path / name], tmp_path)) == 1


@pytest.mark.parametrize(
    ("name", "source"),
    [
        # specifications and arithmetic pass
        ("x.py", "TIMEOUT = 300  # each apt-get step is bounded at 300 s\n"),
        ("x.py", "COPY_BYTES = 1 << 30  # a 1 GiB copy_\n"),
        ("x.h", "// time that takes at 3.35 TB/s (HBM3 peak: a lower bound)\n"),
        ("x.py", "'''new and old read once each (2x the model's bytes).'''\n"),
        ("x.py", "'''The FedALC paper reports P@1 58.7-59.7 on Bibtex.'''\n"),
        ("x.toml", "# does gamma = 0.3 g0 stay within 0.10 of gamma = 0 at >= 5x fewer bytes up?\n"),
        ("x.py", "x = 1  # the 10% most frequent classes dealt round-robin to 10 clients\n"),
        ("x.py", "s = '~4.8x'  # a string, not a comment\n"),
    ],
)
def test_a_specification_passes(tmp_path, name: str, source: str) -> None:
    (tmp_path / name).write_text(source)
    assert measured_numbers([tmp_path / name], tmp_path) == []
