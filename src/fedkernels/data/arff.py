"""Reader for Mulan's multi-label ARFF files (the format its public datasets are published in).

An ARFF file declares its attributes, then lists one sample per line after ``@data``, either sparse
(``{index value,index value,...}``, indices 0-based) or dense (one value per attribute, comma
separated). Mulan puts the ``L`` labels in the last ``L`` attributes (0/1 nominals); everything
before them is a feature. :func:`read_mulan_arff` returns :class:`XCData` like the other readers,
so ``fedkernels data get`` can turn a Mulan download into ``train.txt``/``test.txt``.

Every value is checked as the XC reader checks its own (ASCII digits for indices, finite float32
values), with the file and line in the message.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .xc_format import _FLOAT32_MAX, MAX_DIM, XCData, _is_id, text_lines


def _value(tok: str, where: str) -> float:
    try:
        v = float(tok) if tok.isascii() and "_" not in tok else math.nan
    except ValueError:
        raise ValueError(f"{where}: bad value {tok!r}") from None
    if not math.isfinite(v) or abs(v) > _FLOAT32_MAX:
        raise ValueError(f"{where}: value {tok!r} is not a finite float32")
    return v


def read_mulan_arff(path: str | Path, num_labels: int) -> XCData:
    """Read a Mulan multi-label ARFF file whose last ``num_labels`` attributes are the labels.

    Args:
        path: the ``.arff`` file.
        num_labels: L, the number of label attributes (at the end, as Mulan writes them).

    Returns:
        :class:`XCData`: float32 CSR features ``[N, A - L]`` and 0/1 labels ``[N, L]``.

    Raises:
        ValueError: naming the file and line: no ``@data`` section, fewer attributes than labels,
            more than ``MAX_DIM`` attributes, an index out of range or not in ASCII digits, a value
            that is not a finite float32, or a dense line with the wrong number of values.
    """
    path = Path(path)
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or not 0 <= num_labels <= MAX_DIM:
        raise ValueError(f"num_labels must be an integer in [0, {MAX_DIM}], got {num_labels!r}")
    lines = text_lines(path, what="ARFF file")
    attrs = 0
    for lineno, line in lines:
        head = line.strip().lower()
        if head.startswith("@attribute"):
            attrs += 1
            if attrs > MAX_DIM:
                raise ValueError(f"{path}:{lineno}: more than {MAX_DIM} attributes")
        elif head.startswith("@data"):
            break
    else:
        raise ValueError(f"{path}: no @data section (not an ARFF file)")
    if attrs < num_labels:
        raise ValueError(f"{path}: {attrs} attributes, fewer than the {num_labels} labels")
    num_features = attrs - num_labels
    feat_ids: list[int] = []
    feat_vals: list[float] = []
    labels: list[int] = []
    feat_ptr, lab_ptr = [0], [0]
    for lineno, line in lines:
        text = line.strip()
        if not text or text.startswith("%"):
            continue
        where = f"{path}:{lineno}"
        if text.startswith("{"):
            if not text.endswith("}"):
                raise ValueError(f"{where}: a sparse line must end with '}}'")
            pairs: list[tuple[int, str]] = []
            for item in text[1:-1].split(","):
                if not item.strip():
                    continue
                idx, _, val = item.strip().partition(" ")
                if not _is_id(idx):
                    raise ValueError(f"{where}: bad attribute index {idx!r} (ASCII digits only)")
                pairs.append((int(idx), val.strip()))
        else:
            toks = [t.strip() for t in text.split(",")]
            if len(toks) != attrs:
                raise ValueError(f"{where}: a dense line needs {attrs} values, got {len(toks)}")
            pairs = list(enumerate(toks))
        for at, val in pairs:
            if at >= attrs:
                raise ValueError(f"{where}: attribute index {at} out of range [0, {attrs})")
            v = _value(val, where)
            if v == 0:
                continue
            if at < num_features:
                feat_ids.append(at)
                feat_vals.append(v)
            else:
                labels.append(at - num_features)
        feat_ptr.append(len(feat_ids))
        lab_ptr.append(len(labels))
    n = len(feat_ptr) - 1
    features = sp.csr_matrix(
        (np.asarray(feat_vals, np.float32), np.asarray(feat_ids, np.int64), np.asarray(feat_ptr, np.int64)),
        shape=(n, num_features),
    )
    features.sum_duplicates()
    lab = sp.csr_matrix(
        (np.ones(len(labels), np.float32), np.asarray(labels, np.int64), np.asarray(lab_ptr, np.int64)),
        shape=(n, num_labels),
    )
    lab.sum_duplicates()
    lab.data[:] = 1.0
    return XCData(features, lab)
