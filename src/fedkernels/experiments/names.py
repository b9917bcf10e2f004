"""Algorithm names as users type them, matched to the registered spelling."""

from __future__ import annotations

from ..fl.registry import strategies


def canonical_name(name: str) -> str:
    """The registered spelling of algorithm ``name`` (matched case-insensitively); unknown names as given."""
    cls = strategies().get(name.lower())
    return cls.name if cls is not None else name
