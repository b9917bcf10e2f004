"""mkdocs hook (mkdocs.yml `hooks:`): docstrings name other objects with Sphinx roles
(``:func:`read_xc```), which Markdown renders as the literal role before the code span; drop the role."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub("", html)
