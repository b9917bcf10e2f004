"""The Extreme Classification Repository's folder layouts, and the two file kinds besides its XC text
format that its newer datasets (LF-AmazonTitles-131K, LF-WikiSeeAlsoTitles-320K, ...) ship.

Layouts a dataset folder (or its one subfolder, as a zip unpacks) may hold, tried in this order:

- **split files** (the LF-* BoW downloads, and the layout of the repository's evaluation code)::

      trn_X_Xf.txt  trn_X_Y.txt  tst_X_Xf.txt  tst_X_Y.txt     features and labels per split
      filter_labels_train.txt  filter_labels_test.txt          (LF-*) reciprocal pairs to drop

  ``*_X_Xf.txt`` and ``*_X_Y.txt`` are sparse matrices in text: a header ``N C`` then one line per
  row of ``col:value`` pairs, 0-based (pyxclib's ``write_sparse_file``); a label is any non-zero.
  A filter file holds one ``row label`` pair per line (0-based).
- **train/test XC files**: ``train.txt`` and ``test.txt`` (the repository's "BoW features" zips,
  e.g. ``Amazon670K.bow/``), or ``<stem>_train.txt`` and ``<stem>_test.txt`` (the older zips,
  e.g. ``Eurlex/eurlex_train.txt``), each in the XC format (header ``N F L``).

Every reader checks what a file claims (header sizes, ids, values, row count) before sizing anything
from it, and names the file and line of the first problem.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._validate import check_int
from .xc_format import (
    MAX_DIM,
    XCData,
    _is_id,
    check_declared_rows,
    check_parsed,
    parse_budget,
    parse_id_value,
    read_xc,
    text_lines,
)

SPLIT_FILES = {"train": ("trn_X_Xf.txt", "trn_X_Y.txt"), "test": ("tst_X_Xf.txt", "tst_X_Y.txt")}
FILTER_FILES = {"train": "filter_labels_train.txt", "test": "filter_labels_test.txt"}


def _header(line: str, path: Path) -> tuple[int, int]:
    parts = line.split()
    if len(parts) != 2 or not all(_is_id(p) for p in parts):
        raise ValueError(f"{path}: header must be 'N C' (two non-negative integers), got {line.strip()!r}")
    n, c = int(parts[0]), int(parts[1])
    if c > MAX_DIM:
        raise ValueError(f"{path}: header's C={c} exceeds the bound {MAX_DIM} (2**26)")
    return n, c


def read_sparse_text(path: str | Path) -> sp.csr_matrix:
    """A sparse matrix in the repository's text form (header ``N C``, then ``col:value ...`` per row).

    Returns:
        float32 CSR ``[N, C]`` (duplicate columns in a row add up, as scipy does).

    Raises:
        ValueError: naming the file and line: a path that is not a regular file (a FIFO, device or
            folder: refused by type before it is read), a bad header, C above ``MAX_DIM`` (2**26), an N
            the file's bytes cannot hold, a malformed pair, a column out of ``[0, C)``, a value that is
            not a finite float32, or a row count other than the header's N.
    """
    path = Path(path)
    cols, vals, ptr = array("q"), array("d"), array("q", [0])  # machine arrays: 8 bytes a value
    lines = text_lines(path, what="sparse matrix file")
    first = next(lines, None)
    if first is None:
        raise ValueError(f"{path}: empty file (no 'N C' header)")
    n, c = _header(first[1], path)
    check_declared_rows(n, path, "rows")
    rows, budget = 0, parse_budget()
    for lineno, line in lines:
        if rows == n and not line.strip():
            continue  # trailing blank lines
        for tok in line.split():
            j, v = parse_id_value(tok, c, f"{path}:{lineno}", "entry", "column")
            cols.append(j)
            vals.append(v)
        ptr.append(len(cols))
        rows += 1
        check_parsed(2 * len(cols) + rows, budget, path, lineno)
        if rows > n:
            raise ValueError(f"{path}: header says N={n} rows but the file has more")
    if rows != n:
        raise ValueError(f"{path}: header says N={n} rows but the file has {rows}")
    m = sp.csr_matrix(
        (np.asarray(vals, dtype=np.float32), np.asarray(cols, dtype=np.int64), np.asarray(ptr, dtype=np.int64)),
        shape=(n, c),
    )
    m.sum_duplicates()
    return m


def read_split(features: str | Path, labels: str | Path) -> XCData:
    """One split from its ``*_X_Xf.txt`` features and ``*_X_Y.txt`` labels (non-zeros are labels).

    Raises:
        ValueError: as :func:`read_sparse_text`, or the two files with different row counts.
    """
    x, y = read_sparse_text(features), read_sparse_text(labels)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{features} has {x.shape[0]} rows but {labels} has {y.shape[0]}")
    y.eliminate_zeros()
    y.data[:] = 1.0
    return XCData(x, y)


def read_filter(path: str | Path, num_rows: int, num_labels: int) -> tuple[np.ndarray, np.ndarray]:
    """A filter file (``row label`` per line, 0-based) as CSR over the split's rows.

    Returns:
        ``(indptr int64 [num_rows + 1], indices int64 [nnz])``, each row's labels sorted and unique.

    Raises:
        ValueError: naming the file and line: not two ids, or an id out of ``[0, num_rows)`` /
            ``[0, num_labels)``; a path that is not a regular file (a FIFO, device or folder: refused
            by type before it is read); ``num_rows`` or ``num_labels`` not an integer in range
            (``num_labels <= MAX_DIM``).
    """
    path = Path(path)
    num_rows = check_int("num_rows", num_rows, 0)
    num_labels = check_int("num_labels", num_labels, 0, MAX_DIM)
    rows, labs, budget = array("q"), array("q"), parse_budget()
    for lineno, line in text_lines(path, what="filter file"):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2 or not all(_is_id(p) for p in parts):
            raise ValueError(f"{path}:{lineno}: expected 'row label' (two non-negative integers), got {line!r}")
        r, lab = int(parts[0]), int(parts[1])
        if r >= num_rows or lab >= num_labels:
            raise ValueError(
                f"{path}:{lineno}: pair ({r}, {lab}) out of range: rows [0, {num_rows}), labels [0, {num_labels})"
            )
        rows.append(r)
        labs.append(lab)
        check_parsed(2 * len(rows), budget, path, lineno)
    m = sp.csr_matrix(
        (np.ones(len(rows), dtype=np.int8), (np.asarray(rows, dtype=np.int64), np.asarray(labs, dtype=np.int64))),
        shape=(num_rows, num_labels),
    )
    m.sum_duplicates()
    m.sort_indices()
    return m.indptr.astype(np.int64), m.indices.astype(np.int64)


@dataclass(frozen=True)
class Layout:
    """Where a dataset folder keeps its parts.

    Attributes:
        kind: ``"split"`` (``trn_X_Xf.txt`` ...) or ``"xc"`` (train/test XC files).
        train, test: for ``"xc"`` the two files; for ``"split"`` the features file of each split
            (its labels file is :data:`SPLIT_FILES`'s partner beside it).
        filters: split name -> filter file, for those present.
    """

    kind: str
    train: Path
    test: Path
    filters: dict[str, Path]


def _layout_in(folder: Path) -> Layout | None:
    filters = {part: folder / name for part, name in FILTER_FILES.items() if (folder / name).is_file()}
    if all((folder / f).is_file() for pair in SPLIT_FILES.values() for f in pair):
        return Layout("split", folder / SPLIT_FILES["train"][0], folder / SPLIT_FILES["test"][0], filters)
    if (folder / "train.txt").is_file() and (folder / "test.txt").is_file():
        return Layout("xc", folder / "train.txt", folder / "test.txt", filters)
    trains = sorted(folder.glob("*_train.txt"))
    pairs = [t for t in trains if t.with_name(t.name[: -len("_train.txt")] + "_test.txt").is_file()]
    if len(pairs) == 1:
        t = pairs[0]
        return Layout("xc", t, t.with_name(t.name[: -len("_train.txt")] + "_test.txt"), filters)
    return None


def find_layout(folder: str | Path) -> Layout | None:
    """The layout of ``folder``, or of its only subfolder (a zip's top folder); ``None`` if neither holds one."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    found = _layout_in(folder)
    if found is not None:
        return found
    subs = [p for p in folder.iterdir() if p.is_dir()]
    return _layout_in(subs[0]) if len(subs) == 1 else None


def read_layout(layout: Layout) -> tuple[XCData, XCData]:
    """The (train, test) parts of a layout (see :func:`find_layout`)."""
    if layout.kind == "split":
        tr, te = (
            read_split(f, f.with_name(SPLIT_FILES[part][1]))
            for part, f in (("train", layout.train), ("test", layout.test))
        )
    else:
        tr, te = read_xc(layout.train), read_xc(layout.test)
    if (tr.num_features, tr.num_labels) != (te.num_features, te.num_labels):
        raise ValueError(
            f"{layout.train} is [{tr.num_features} features, {tr.num_labels} labels] but {layout.test} is "
            f"[{te.num_features}, {te.num_labels}]: the two splits of one dataset must agree"
        )
    return tr, te


def place_layout(layout: Layout, folder: Path) -> None:
    """Move a layout's files into ``folder`` under the names the loader looks for first: ``train.txt``
    and ``test.txt`` for XC files; the split and filter files under their own names."""
    moves: list[tuple[Path, str]] = []
    if layout.kind == "split":
        for part, feats in (("train", layout.train), ("test", layout.test)):
            moves += [(feats, SPLIT_FILES[part][0]), (feats.with_name(SPLIT_FILES[part][1]), SPLIT_FILES[part][1])]
    else:
        moves += [(layout.train, "train.txt"), (layout.test, "test.txt")]
    moves += [(src, FILTER_FILES[part]) for part, src in layout.filters.items()]
    for src, name in moves:
        if src != folder / name:
            os.replace(src, folder / name)
