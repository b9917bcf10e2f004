"""Reader for the Extreme Classification Repository text format.

::

    N F L                      header: samples, features, labels
    l1,l2,... f:v f:v ...      one line per sample, 0-based ids; either part may be empty

A line starting with a space has no labels; an empty line has neither labels nor features.
"""

from __future__ import annotations

import math
import os
from array import array
from collections.abc import Iterator, MutableSequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._files import open_regular
from .._memory import available_memory

_FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_DIM = 2**26
"""The largest F and L a header may claim (67,108,864; the largest XC datasets have a few million),
checked before anything is sized from them."""


def _is_id(tok: str) -> bool:
    """A non-negative decimal id in ASCII digits only (``str.isdigit`` also takes e.g. '٣' and '²')."""
    return tok.isascii() and tok.isdigit()


def parse_value(text: str, where: str, shown: str | None = None, what: str = "value") -> float:
    """A finite float32 written in ASCII (no ``_`` digit separators) from ``text``; otherwise a
    ValueError naming ``where`` and ``shown`` (default: ``text``) as a ``what``."""
    shown = text if shown is None else shown
    try:
        v = float(text) if text.isascii() and "_" not in text else math.nan
    except ValueError:
        raise ValueError(f"{where}: bad {what} {shown!r}") from None
    if not math.isfinite(v) or abs(v) > _FLOAT32_MAX:
        raise ValueError(
            f"{where}: {what} {shown!r} is not a finite float32 in ASCII (NaN, inf, out of range or non-ASCII)"
        )
    return v


def parse_id_value(tok: str, bound: int, where: str, token: str, id_name: str) -> tuple[int, float]:
    """One ``id:value`` token: the id in ASCII digits below ``bound``, the value as :func:`parse_value`.
    Errors name ``where`` and call the token a ``token`` and its id an ``id_name``."""
    i, sep, val = tok.partition(":")
    if not sep or not _is_id(i):
        raise ValueError(f"{where}: bad {token} {tok!r} (expected {id_name}:value, the {id_name} in ASCII digits)")
    ident = int(i)
    if ident >= bound:
        raise ValueError(f"{where}: {id_name} {ident} out of range [0, {bound})")
    return ident, parse_value(val, where, shown=tok, what=f"{token} value")


@dataclass
class XCData:
    """A multi-label dataset as two CSR matrices.

    Attributes:
        features: float32 CSR ``[N, F]``.
        labels: float32 CSR ``[N, L]`` of 0/1 (sorted, duplicate-free column ids per row).
    """

    features: sp.csr_matrix
    labels: sp.csr_matrix

    @property
    def num_samples(self) -> int:
        return int(self.features.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def num_labels(self) -> int:
        return int(self.labels.shape[1])

    def subset(self, rows: np.ndarray) -> XCData:
        """The samples ``rows`` (int ``[m]``), in that order."""
        return XCData(self.features[rows], self.labels[rows])


PARSE_COPIES = 3
"""A text reader's peak over the arrays it parses into (8 bytes a value): the arrays, then the numpy and
scipy copies made when the matrix is built (about 2x more, measured on XC files of labels, features and
empty lines)."""


def parse_budget() -> int:
    """Bytes of parsed values a text reader may hold: the available memory over :data:`PARSE_COPIES`, so
    its peak stays within the machine whatever the file claims or holds."""
    return available_memory() // PARSE_COPIES


def check_parsed(values: int, budget: int, path: Path, lineno: int) -> None:
    """Refuse a file once the ``values`` parsed so far (8 bytes each) exceed ``budget`` (:func:`parse_budget`).

    Raises:
        ValueError: naming the file and line.
    """
    if 8 * values > budget:
        raise ValueError(
            f"{path}:{lineno}: the values read so far take {8 * values / 2**30:.2f} GiB, more than the "
            f"{budget / 2**30:.2f} GiB a reader may hold on this machine (its available memory / {PARSE_COPIES})"
        )


def text_lines(path: Path, start: int = 1, what: str = "data file") -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file, read from a regular file only (a FIFO, device
    or directory is refused by type before it is opened: :func:`fedkernels._files.open_regular`).
    Lines are split on ``\\n`` and decoded one at a time, so a byte that is not UTF-8 is a
    ``ValueError`` naming the file and its line (``UnicodeDecodeError`` named neither)."""
    with open_regular(path, what) as fh:
        for lineno, raw in enumerate(fh, start=start):
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(
                    f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}: {e.reason})"
                ) from None


def first_line(path: Path, what: str = "data file", limit: int = 1 << 12) -> str:
    """The start of a regular file's first line (at most ``limit`` bytes: a header is short), decoded
    with replacement characters; for telling formats apart and reading headers without the data."""
    with open_regular(path, what) as fh:
        return fh.readline(limit).decode("utf-8", "replace")


def check_declared_rows(n: int, path: Path, what: str) -> None:
    """A header's row count against the file's size: every row takes at least one byte (its line
    end), so a file of S bytes holds at most S rows.

    Raises:
        ValueError: naming the file and both numbers.
    """
    size = os.stat(path).st_size
    if n > size:
        raise ValueError(f"{path}: header says N={n} {what} but the file has only {size} bytes (a line each)")


def _parse_header(line: str, path: Path) -> tuple[int, int, int]:
    parts = line.split()
    if len(parts) != 3 or not all(_is_id(p) for p in parts):
        raise ValueError(f"{path}: header must be 'N F L' (three non-negative integers), got {line.strip()!r}")
    n, f, l = (int(p) for p in parts)
    for name, value in (("F", f), ("L", l)):
        if value > MAX_DIM:
            raise ValueError(f"{path}: header's {name}={value} exceeds the bound {MAX_DIM} (2**26)")
    return n, f, l


def _parse_line(
    line: str,
    lineno: int,
    path: Path,
    num_features: int,
    num_labels: int,
    labels: MutableSequence[int],
    feat_ids: MutableSequence[int],
    feat_vals: MutableSequence[float],
) -> None:
    """Append one sample's label ids and features to the flat arrays (validating ranges)."""
    line = line.rstrip("\r\n")
    if not line.strip():
        return
    # The label part is everything before the first space; it is empty when the line starts with one.
    head, _, rest = line.partition(" ")
    where = f"{path}:{lineno}"
    if head and ":" in head:  # no label part at all, the first token is already a feature
        head, rest = "", line
    if head:
        for tok in head.split(","):
            if not _is_id(tok):
                raise ValueError(f"{where}: bad label id {tok!r} (ASCII digits only)")
            lab = int(tok)
            if lab >= num_labels:
                raise ValueError(f"{where}: label id {lab} out of range [0, {num_labels})")
            labels.append(lab)
    for tok in rest.split():
        f, v = parse_id_value(tok, num_features, where, "feature", "feature id")
        feat_ids.append(f)
        feat_vals.append(v)


def read_xc(path: str | Path) -> XCData:
    """Read one XC-format file.

    Args:
        path: the file (e.g. ``.../bibtex/train.txt``).

    Returns:
        :class:`XCData` with ``features [N, F]`` and ``labels [N, L]``. Duplicate label ids on a
        line collapse to one; duplicate feature ids add up (as scipy does).

    Raises:
        ValueError: naming the file (and line): a malformed header or line, F or L above
            :data:`MAX_DIM`, an id out of the header's range or not in ASCII digits, a feature value
            that is NaN, inf or overflows (``1e999``), or a sample count that differs from the header's N.

    Example:
        With ``folder`` a copy of Bibtex in the XC format (a folder with ``train.txt`` and ``test.txt``)::

            d = read_xc(folder / "train.txt")
            d.features.shape, d.labels.shape   # ((4880, 1836), (4880, 159))
    """
    path = Path(path)
    lines = text_lines(path)
    first = next(lines, None)
    if first is None:
        raise ValueError(f"{path}: empty file (no 'N F L' header)")
    n, num_features, num_labels = _parse_header(first[1], path)
    check_declared_rows(n, path, "samples")
    lab_ptr, feat_ptr, labels, feat_ids = array("q", [0]), array("q", [0]), array("q"), array("q")
    feat_vals = array("d")  # machine arrays, not lists: 8 bytes a value instead of a Python object's ~40
    rows, budget = 0, parse_budget()
    for lineno, line in lines:
        if rows == n and not line.strip():
            continue  # trailing blank lines after the last sample
        if rows == n:
            raise ValueError(f"{path}:{lineno}: header says N={n} samples but the file has more")
        _parse_line(line, lineno, path, num_features, num_labels, labels, feat_ids, feat_vals)
        lab_ptr.append(len(labels))
        feat_ptr.append(len(feat_ids))
        rows += 1
        check_parsed(len(labels) + 2 * len(feat_ids) + 2 * rows, budget, path, lineno)
    if rows != n:
        raise ValueError(f"{path}: header says N={n} samples but the file has {rows}")
    features = sp.csr_matrix(
        (
            np.asarray(feat_vals, dtype=np.float32),
            np.asarray(feat_ids, dtype=np.int64),
            np.asarray(feat_ptr, dtype=np.int64),
        ),
        shape=(n, num_features),
    )
    features.sum_duplicates()
    lab = sp.csr_matrix(
        (
            np.ones(len(labels), dtype=np.float32),
            np.asarray(labels, dtype=np.int64),
            np.asarray(lab_ptr, dtype=np.int64),
        ),
        shape=(n, num_labels),
    )
    lab.sum_duplicates()
    lab.data[:] = 1.0
    return XCData(features, lab)
