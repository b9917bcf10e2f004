"""Where the checkout's folders are, for tests in any subfolder of python_tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository root (python_tests/support/paths.py)
