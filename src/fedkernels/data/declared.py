"""The sizes a dataset's headers declare, read from their first lines only, so that what a run will
build from them (a model of p rows, tables over p classes) can be checked before the data is read."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .datasets import locate_data
from .xc_format import _parse_header, first_line
from .xc_layouts import SPLIT_FILES, _header


class DeclaredShape(NamedTuple):
    """What a dataset's headers claim.

    Attributes:
        samples: training samples (with ``test`` ``None``: all samples, split later).
        test: test samples, or ``None`` for one file split by seed.
        features: F.
        labels: L (p).
    """

    samples: int
    test: int | None
    features: int
    labels: int


def declared_shape(path: str | Path) -> DeclaredShape | None:
    """The sizes the headers of dataset ``path`` declare (XC files: ``N F L``; the LF-* split files:
    ``N C`` of each), reading one short line per file; ``None`` for data without headers (libsvm,
    ``.npz``: their sizes are known once read).

    Raises:
        FileNotFoundError: no dataset at ``path`` (as :func:`~fedkernels.data.load_dataset`).
        ValueError: a split file's header that is malformed or out of bounds, or a path that is not
            a regular file (naming it, as the reader would).
    """
    files = locate_data(Path(path))
    if files.layout is not None and files.layout.kind == "split":
        heads = {}
        for part, feats in (("train", files.layout.train), ("test", files.layout.test)):
            labels = feats.with_name(SPLIT_FILES[part][1])
            heads[part] = (_header(first_line(feats), feats), _header(first_line(labels), labels))
        (n, f), (_, c) = heads["train"]
        (nt, ft), (_, ct) = heads["test"]
        return DeclaredShape(n, nt, max(f, ft), max(c, ct))
    found = [files.layout.train, files.layout.test] if files.layout is not None else [files.train, files.test]
    shapes = []
    for file in found:
        if file is None:
            continue
        if file.suffix == ".npz":
            return None
        try:
            shapes.append(_parse_header(first_line(file), file))
        except ValueError:
            return None  # libsvm (no header), or a header the reader will refuse by name
    n = shapes[0][0]
    return DeclaredShape(
        n, shapes[1][0] if len(shapes) > 1 else None, max(s[1] for s in shapes), max(s[2] for s in shapes)
    )
