"""The docs' tutorial runs as written: its ```python blocks, in order, in one namespace (small sizes,
a few seconds), so the page's PyTorch loop and the heads' documented outputs stay true."""

from __future__ import annotations

import re

from python_tests.support.paths import ROOT

TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCKS = re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(encoding="utf-8"), flags=re.S)


def test_tutorial_blocks_run_in_order():
    assert len(BLOCKS) >= 4
    namespace: dict = {"__name__": "tutorial"}
    for i, code in enumerate(BLOCKS):
        exec(compile(code, f"{TUTORIAL}:block{i}", "exec"), namespace)
