"""Every command docs/quickstart.md shows, run as written, from a fresh clone of this checkout.

- The ```bash block is walked as the README's quick start is (test_readme_quickstart.walk_in_clone: a
  ``git clone`` whose ``.venv`` is the venv running the tests, the build taken as done, ``make demo``
  with the shorter job this page names, ``make test`` as ``make -n test``).
- The "On real data" block and the inline commands run line by line in such a clone, with ``fedkernels``
  from that venv. Those that read Bibtex are marked real_data and run with ``$FEDKERNELS_DATA_DIR`` at the
  folder holding it; ``data get`` runs where Bibtex was fetched (it downloads otherwise). Two jobs of many
  minutes take flags that shorten them, appended after the line as written (flags override a preset;
  argparse takes the last of a repeated flag): ``--preset fedmlh-bibtex`` (3 seeds x 70 rounds) and the
  30-round benchmark, as the README walk shortens ``make demo``.
- The Examples block: each line is a script python_tests/test_examples.py runs with these same
  arguments (:data:`EXAMPLES`), except ``bibtex_heads.py --data bibtex``, whose dataset name (there a
  path) runs here as written.

A command line this test does not know fails :func:`test_every_block_line_is_checked`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fedkernels
from python_tests.docs.test_readme_quickstart import makefile_targets, makefile_venv, walk_in_clone
from python_tests.support.paths import ROOT
from python_tests.support.real_data import dataset

PAGE = ROOT / "docs" / "quickstart.md"
TEXT = PAGE.read_text(encoding="utf-8")
BIBTEX = dataset("bibtex")

# Examples-block line -> the test of python_tests/test_examples.py that runs that script with the same
# arguments (the defaults of custom_strategy.py and run_local.py are the --rounds the test passes).
EXAMPLES = {
    "python examples/compile_ops.py": "test_compile_ops",
    "python examples/custom_strategy.py": "test_custom_strategy",
    "python examples/flower_app/run_local.py": "test_flower_app_on_loopback",
}
# Long jobs and the flags appended to shorten them (see the module docstring).
SHORTENED = {
    "fedkernels run --preset fedmlh-bibtex": "--seeds 1 --rounds 2",
    "python -m bench.fl.fl_fedmlh --datasets bibtex --seeds 0 1 2 --rounds 30": "--seeds 0 --rounds 2",
}
# The complete commands the prose shows inline (the rest of its code spans are flags and fragments).
INLINE = (
    'make demo DEMO_ARGS="--rounds 2"',
    "fedkernels run --help",
    "python -m bench.fl.fl_fedmlh --datasets bibtex --seeds 0 1 2 --rounds 30",
)


def blocks() -> list[tuple[str, list[str]]]:
    """``(language, command lines)`` of every fenced block of the page, comments and blank lines dropped."""
    out = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", TEXT, flags=re.S):
        lines = [line.split("#", 1)[0].strip() for line in body.splitlines()]
        out.append((lang, [line for line in lines if line]))
    return out


def bash_block() -> list[str]:
    return next(lines for lang, lines in blocks() if lang == "bash")


def real_data_block() -> list[str]:
    return next(lines for lang, lines in blocks() if lines and lines[0].startswith("fedkernels data get"))


def examples_block() -> list[str]:
    return next(lines for lang, lines in blocks() if lines and lines[0].startswith("python examples/"))


def demo_args() -> str:
    found = re.search(r'make demo DEMO_ARGS="([^"]+)"', TEXT)
    assert found, 'the page no longer says how to shorten the demo (make demo DEMO_ARGS="...")'
    return found.group(1)


def test_every_block_line_is_checked():
    assert len(blocks()) == 3, [lines for _, lines in blocks()]
    for line in bash_block():
        words = shlex.split(line)
        if words[0] == "make":
            assert set(words[1:]) <= makefile_targets(), line
        else:
            assert words[:2] == ["source", f"{makefile_venv()}/bin/activate"], line
    for line in real_data_block():
        assert line.startswith("fedkernels "), line
    test_examples = (ROOT / "python_tests" / "test_examples.py").read_text(encoding="utf-8")
    for line in examples_block():
        if line.startswith("python examples/bibtex_heads.py"):
            assert line == "python examples/bibtex_heads.py --data bibtex", line  # runs below
        else:
            assert line in EXAMPLES, f"{line!r}: no test runs it (add it to EXAMPLES or run it here)"
            assert f"def {EXAMPLES[line]}(" in test_examples, EXAMPLES[line]
    for command in INLINE:
        assert f"`{command}`" in TEXT, command


def test_bash_block_walks_in_a_fresh_clone(tmp_path):
    walk_in_clone(tmp_path, bash_block(), demo_args())


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A fresh clone of this checkout (its committed state), as a user starts from."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    folder = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(folder)], check=True)
    return folder


def run_line(line: str, cwd: Path, data_dir: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``line`` in bash in ``cwd``, with this venv's scripts first on PATH (as after the activate line)."""
    env = dict(os.environ, FEDKERNELS_DATA_DIR=str(data_dir), OMP_NUM_THREADS="1")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{line!r} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_listing_lines(clone, tmp_path):
    assert "fedkernels run --list-presets" in real_data_block()
    out = run_line("fedkernels run --list-presets", clone, tmp_path).stdout
    assert "fedmlh-bibtex" in out
    assert "--preset" in run_line("fedkernels run --help", clone, tmp_path).stdout


def test_data_get_where_bibtex_was_fetched(clone):
    line = next(x for x in real_data_block() if x.startswith("fedkernels data get"))
    from fedkernels.data.fetcher import MARKER
    from fedkernels.data.locations import data_dir
    from fedkernels.data.remote import get_remote

    fetched = data_dir()
    if not (fetched / get_remote(line.split()[-1]).name / MARKER).is_file():
        pytest.skip(f"`{line}` downloads Bibtex (network); run it once and this test runs it as written")
    assert str(fetched) in run_line(line, clone, fetched).stdout


def final_p1(out: Path) -> dict[str, float]:
    """Final P@1 per algorithm of a run's ``results.json``."""
    results = json.loads((out / "results.json").read_text())["results"]
    return {r["algorithm"]: r["final"]["P@1"] for r in results}


@pytest.mark.real_data("bibtex")
def test_bibtex_run_gives_the_page_s_numbers(clone):
    line = next(x for x in real_data_block() if x.startswith("fedkernels run --dataset bibtex"))
    run_line(line, clone, BIBTEX.parent, timeout=900)
    said = re.search(r"gave final P@1 FedAvg ([\d.]+), FedMLH ([\d.]+) .*?FedSS ([\d.]+)", TEXT, flags=re.S)
    assert said, "the page no longer states the Bibtex run's final P@1"
    got = final_p1(clone / "fedkernels-out")
    assert f"{got['FedAvg']:.3f}" == said.group(1) and f"{got['FedMLH']:.3f}" == said.group(2), got
    # FedSS's third decimal depends on the CPU level and the host: the page names what each level gave
    by_level: dict[str, set[str]] = {}
    for value, level in re.findall(r"([\d.]+) at (?:the )?(avx2|avx512|generic)", TEXT):
        by_level.setdefault(level, set()).add(value)
    level = fedkernels._info.build_info()["cpu_isa"]
    want = by_level[level] if level in by_level else {said.group(3), *(v for vs in by_level.values() for v in vs)}
    assert f"{got['FedSS']:.3f}" in want, (got, level, by_level)


@pytest.mark.real_data("bibtex")
@pytest.mark.parametrize("line", list(SHORTENED))
def test_long_jobs_run_shortened(clone, line):
    assert line in real_data_block() or f"`{line}`" in TEXT, line
    out = run_line(f"{line} {SHORTENED[line]}", clone, BIBTEX.parent, timeout=900).stdout
    assert "skip bibtex" not in out, out  # the benchmark skips (exit 0) a dataset it cannot find


@pytest.mark.real_data("bibtex")
def test_bibtex_heads_example_by_dataset_name(clone):
    out = run_line("python examples/bibtex_heads.py --data bibtex", clone, BIBTEX.parent).stdout
    assert re.findall(r"head=(\w+)", out) == ["linear", "fedmlh", "sampled"], out
