"""What a user of the package relies on besides the code: the version, type hints, licence, changelog."""

from __future__ import annotations

from pathlib import Path

import tomllib

import fedkernels

ROOT = Path(__file__).resolve().parents[1]


def test_version_matches_pyproject():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert fedkernels.__version__ == version
    assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text()


def test_ships_type_hints_and_licence():
    assert (Path(fedkernels.__file__).parent / "py.typed").is_file()  # PEP 561 marker, inside the package
    licence = (ROOT / "LICENSE").read_text()
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"] == "Apache-2.0"


def test_gitignore_covers_run_outputs():
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "fedkernels-demo/" in ignored and "fedkernels-out/" in ignored


def test_one_cli_package_behind_the_script():
    """The ``fedkernels`` script and ``python -m fedkernels_cli`` are the one CLI package, shipped in the wheel."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"] == {"fedkernels": "fedkernels_cli.main:main"}
    assert set(project["tool"]["scikit-build"]["wheel"]["packages"]) == {"src/fedkernels", "src/fedkernels_cli"}
    assert (ROOT / "src" / "fedkernels_cli" / "__main__.py").is_file()
    assert not (ROOT / "src" / "fedkernels" / "cli").exists()
