"""tools/ci/cross_compile_aarch64.py: what CI step 1d does when the cross compiler is missing."""

from __future__ import annotations

import shutil

import pytest

from tools.ci import cross_compile_aarch64 as cross

MISSING = "fk-no-such-cross-compiler"


def no_apt(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with neither the compiler nor apt-get."""
    real = shutil.which
    gone = (MISSING, "apt-get")
    monkeypatch.setattr(cross.shutil, "which", lambda name, *a, **k: None if name in gone else real(name))


def test_install_failure_with_skip_missing_skips_with_the_reason(monkeypatch, capsys) -> None:
    no_apt(monkeypatch)
    assert cross.main(["--cxx", MISSING, "--install", "--skip-missing"]) == 0
    out = capsys.readouterr().out
    assert "SKIPPED" in out and "no apt-get" in out


def test_install_failure_without_skip_missing_is_exit_2(monkeypatch, capsys) -> None:
    no_apt(monkeypatch)
    assert cross.main(["--cxx", MISSING, "--install"]) == 2
    assert "error:" in capsys.readouterr().out


def test_missing_compiler_without_install_is_exit_2_or_a_skip(monkeypatch, capsys) -> None:
    no_apt(monkeypatch)
    assert cross.main(["--cxx", MISSING]) == 2
    assert cross.main(["--cxx", MISSING, "--skip-missing"]) == 0
    assert "SKIPPED" in capsys.readouterr().out


def test_a_failing_apt_get_is_reported(monkeypatch) -> None:
    real = shutil.which
    monkeypatch.setattr(cross.shutil, "which", lambda name, *a, **k: "/bin/false" if name == "apt-get" else real(name))
    monkeypatch.setattr(cross.os, "geteuid", lambda: 0)
    with pytest.raises(cross.InstallError, match="apt-get update -q failed"):
        cross.install_compiler(MISSING)
