"""The README's quick start, walked as written in a fresh clone (the ```bash block under "Quick start").

Every line of the block must be one this test knows how to check, so a new line cannot slip in
unchecked: ``make <target>`` (a target of the Makefile), ``source <venv>/bin/activate`` (the
Makefile's VENV) and ``fedkernels ...`` (run as written after the activate line). The block then runs, line by line, in
one bash process in a ``git clone`` of this checkout, with two substitutions, both because a clone
has no build:

- the clone's ``.venv`` is a link to the environment running these tests (``sys.prefix``: in CI
  ``make test``'s ``.venv``, an editable install of this checkout), so ``make`` finds its venv made;
- ``make demo`` runs as ``make -o install demo``: the editable build (minutes of C++) is taken as
  done, everything else in the recipe runs, with the shorter job the README itself names
  (``DEMO_ARGS="--rounds 2"``); ``make test`` runs as ``make -n test`` (it is the suite running now).

The activate line runs as written and must put ``fedkernels`` on PATH for the lines after it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from python_tests.support.paths import ROOT

README = ROOT / "README.md"


def quickstart_lines() -> list[str]:
    """The commands of the first ```bash block of the README's "Quick start" section, comments dropped."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block, "README 'Quick start' has no ```bash block"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def short_demo_args() -> str:
    """The shorter demo the README names (``make demo DEMO_ARGS="..."``), which the walk runs."""
    found = re.search(r'make demo DEMO_ARGS="([^"]+)"', README.read_text(encoding="utf-8"))
    assert found, 'README no longer says how to shorten the demo (make demo DEMO_ARGS="...")'
    return found.group(1)


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {t for line in re.findall(r"^\.PHONY:(.*)$", text, flags=re.M) for t in line.split()}


def makefile_venv() -> str:
    return re.search(r"^VENV \?= (\S+)$", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.M).group(1)


def test_quickstart_lines_are_what_the_makefile_and_cli_provide():
    lines = quickstart_lines()
    assert any(line.startswith("make demo") for line in lines), lines
    assert any(line.startswith("make test") for line in lines), lines
    assert f"source {makefile_venv()}/bin/activate" in lines, lines
    activated = False
    for line in lines:
        words = shlex.split(line)
        if words[0] == "make":
            assert set(words[1:]) <= makefile_targets(), f"{line!r}: not a Makefile target"
        elif words[0] == "source":
            assert words[1] == f"{makefile_venv()}/bin/activate", line
            activated = True
        elif words[0] == "fedkernels":
            assert activated, f"{line!r} comes before the activate line that puts fedkernels on PATH"
        else:
            pytest.fail(f"README quick start line {line!r} is not one this test can check")


def walk_script(lines: list[str], demo_args: str | None = None) -> str:
    """The block as one bash script, with the substitutions of the module docstring (``demo_args``: the
    shorter demo the page names, default the README's)."""
    demo_args = short_demo_args() if demo_args is None else demo_args
    out = ["set -euo pipefail"]
    for line in lines:
        if line.startswith("make demo"):
            out.append(f'{line.replace("make demo", "make -o install demo", 1)} DEMO_ARGS="{demo_args}"')
        elif line.startswith("make test"):
            out.append(line.replace("make test", "make -n test", 1))
        else:
            out.append(line)
        if line.startswith("source "):
            out.append('[ "$(command -v fedkernels)" = "$VIRTUAL_ENV/bin/fedkernels" ]')
    return "\n".join(out) + "\n"


def walk_in_clone(tmp_path: Path, lines: list[str], demo_args: str | None = None) -> subprocess.CompletedProcess:
    """Walk ``lines`` (:func:`walk_script`) in a ``git clone`` of this checkout under ``tmp_path``, whose
    venv is the one running the tests; skips where that cannot be set up. Asserts the walk succeeded."""
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix) or not (venv / "bin" / "fedkernels").exists():
        pytest.skip("needs the tests to run in a venv with fedkernels installed (make test's .venv)")
    if shutil.which("git") is None or not (ROOT / ".git").exists() or shutil.which("make") is None:
        pytest.skip("needs git, make and a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True)
    (clone / makefile_venv()).symlink_to(venv, target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(
        ["bash", "-c", walk_script(lines, demo_args)],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"quick start failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert (clone / "fedkernels-demo").is_dir(), "make demo wrote no fedkernels-demo/"
    assert "pytest" in proc.stdout  # make -n test printed the test command
    return proc


def test_quickstart_walks_in_a_fresh_clone(tmp_path):
    walk_in_clone(tmp_path, quickstart_lines())
