"""'Did you mean' for names a user types (algorithms, presets, datasets, options): the closest known
names, so a typo's error answers with the fix instead of a list to read."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str], n: int = 2, exclude: Iterable[str] = ()) -> str:
    """``" (did you mean 'x'?)"`` (or ``'x' or 'y'``) for the known names closest to ``name``, compared
    without case; ``""`` when none is close (difflib ratio below 0.6).

    Args:
        name: what the user typed.
        choices: the known names, as they should be shown.
        n: at most this many suggestions.
        exclude: names never to suggest, compared without case: those a lookup that ignores case has
            already tried (suggesting ``'Bibtex'`` for ``bibtex`` would send the user in a circle).
    """
    skip = {e.lower() for e in exclude}
    by_lower: dict[str, str] = {}
    for c in choices:
        if c.lower() not in skip:
            by_lower.setdefault(c.lower(), c)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=n)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(by_lower[c]) for c in close) + "?)"
