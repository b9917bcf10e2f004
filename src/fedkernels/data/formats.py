"""Readers for the other formats multi-label data comes in, all returning :class:`XCData` (sparse CSR).

- **libsvm multi-label** (the LIBSVM multi-label datasets, scikit-learn's ``dump_svmlight_file``)::

      l1,l2,... f:v f:v ...          no header line; feature ids 1-based by convention

  It differs from the XC format in two ways: there is no ``N F L`` header (so F and L come from the
  data unless given), and feature ids are usually 1-based. ``zero_based="auto"`` (scikit-learn's rule)
  treats the file as 1-based unless some feature id is 0. Label ids are taken as written (0-based).
  A ``# comment`` at the end of a line is ignored.
- **scipy ``.npz``**: a features matrix ``X [N, F]`` and a labels matrix ``Y [N, L]``, each written by
  ``scipy.sparse.save_npz`` (any sparse format; read as CSR, labels made 0/1).

:func:`read_any` picks the reader from the file: ``.npz`` files, XC (first line ``N F L``) or libsvm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .xc_format import MAX_DIM, XCData, _parse_header, _parse_line, read_xc


def read_libsvm(
    path: str | Path, num_features: int | None = None, num_labels: int | None = None, zero_based: bool | str = "auto"
) -> XCData:
    """Read a multi-label libsvm file (``l1,l2 f:v ...`` per line, no header).

    Args:
        path: the file.
        num_features: F (default: the largest feature id + 1, after the 1-based shift).
        num_labels: L (default: the largest label id + 1).
        zero_based: ``True`` (ids as written), ``False`` (subtract 1 from feature ids) or ``"auto"``
            (1-based unless a feature id 0 occurs).

    Returns:
        :class:`XCData` with float32 CSR features and 0/1 labels.

    Raises:
        ValueError: a malformed line (as :func:`read_xc`: non-finite values, non-ASCII ids), an id
            at or above ``MAX_DIM`` (2**26), a 0 feature id with ``zero_based=False``, or an id at or
            above a given ``num_features``/``num_labels``.
    """
    path = Path(path)
    if zero_based not in (True, False, "auto"):
        raise ValueError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    labels: list[int] = []
    feat_ids: list[int] = []
    feat_vals: list[float] = []
    lab_ptr, feat_ptr = [0], [0]
    with path.open("r", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            line = line.split("#", 1)[0].rstrip()
            if not line:
                continue  # blank lines and comment lines are not samples in libsvm files
            _parse_line(line, lineno, path, MAX_DIM, MAX_DIM, labels, feat_ids, feat_vals)  # ids < 2**26
            lab_ptr.append(len(labels))
            feat_ptr.append(len(feat_ids))
    fids = np.asarray(feat_ids, dtype=np.int64)
    one_based = zero_based is False or (zero_based == "auto" and (fids.size == 0 or int(fids.min()) >= 1))
    if one_based:
        if fids.size and int(fids.min()) < 1:
            raise ValueError(f"{path}: feature id 0 in a file read as 1-based (zero_based=False)")
        fids = fids - 1
    n = len(lab_ptr) - 1
    f = _size(fids, num_features, "num_features", "feature", path)
    lab_ids = np.asarray(labels, dtype=np.int64)
    l = _size(lab_ids, num_labels, "num_labels", "label", path)
    features = sp.csr_matrix(
        (np.asarray(feat_vals, dtype=np.float32), fids, np.asarray(feat_ptr, dtype=np.int64)), shape=(n, f)
    )
    features.sum_duplicates()
    lab = sp.csr_matrix(
        (np.ones(lab_ids.size, dtype=np.float32), lab_ids, np.asarray(lab_ptr, dtype=np.int64)), shape=(n, l)
    )
    lab.sum_duplicates()
    lab.data[:] = 1.0
    return XCData(features, lab)


def _size(ids: np.ndarray, given: int | None, arg: str, what: str, path: Path) -> int:
    top = int(ids.max()) + 1 if ids.size else 0
    if given is None:
        return top
    if top > given:
        raise ValueError(f"{path}: {what} id {top - 1} out of range for {arg}={given}")
    return int(given)


def read_npz(features: str | Path, labels: str | Path) -> XCData:
    """Read features ``X [N, F]`` and labels ``Y [N, L]`` saved by ``scipy.sparse.save_npz``.

    Features stay sparse (float32 CSR); labels become 0/1 float32 CSR (any non-zero is a label).

    Raises:
        ValueError: a file that is not a scipy sparse ``.npz``, X and Y with different N, more than
            ``MAX_DIM`` (2**26) columns, or non-finite feature values.
    """
    x = _load_sparse(Path(features), "features")
    y = _load_sparse(Path(labels), "labels")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"features {features} has {x.shape[0]} rows but labels {labels} has {y.shape[0]}")
    for path, m, what in ((features, x, "features"), (labels, y, "labels")):
        if m.shape[1] > MAX_DIM:
            raise ValueError(f"{what} {path}: {m.shape[1]} columns exceed the bound {MAX_DIM} (2**26)")
    x = sp.csr_matrix(x, dtype=np.float32)
    if not np.isfinite(x.data).all():
        raise ValueError(f"features {features}: NaN or inf values (or beyond float32)")
    x.sum_duplicates()
    y = sp.csr_matrix(y, dtype=np.float32)
    y.sum_duplicates()
    y.eliminate_zeros()
    y.data[:] = 1.0
    return XCData(x, y)


def _load_sparse(path: Path, what: str) -> sp.spmatrix:
    try:
        return sp.load_npz(path)
    except (ValueError, KeyError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{what} {path}: not a scipy sparse .npz ({e})") from None


def read_any(path: str | Path) -> XCData:
    """Read one file of samples by its kind: ``<stem>_X.npz`` (with ``<stem>_Y.npz`` beside it), an XC
    text file (first line ``N F L``) or a libsvm multi-label text file."""
    path = Path(path)
    if path.suffix == ".npz":
        stem = path.name[: -len("_X.npz")] if path.name.endswith("_X.npz") else None
        if stem is None:
            raise ValueError(f"{path}: an .npz dataset is a pair <stem>_X.npz (features) and <stem>_Y.npz (labels)")
        return read_npz(path, path.with_name(f"{stem}_Y.npz"))
    with path.open("r", encoding="utf-8") as fh:
        first = fh.readline()
    try:
        _parse_header(first, path)
    except ValueError:
        return read_libsvm(path)
    return read_xc(path)


def write_xc(data: XCData, path: str | Path) -> None:
    """Write :class:`XCData` in the XC text format (header ``N F L``, then ``l1,l2 f:v ...``), which
    :func:`read_xc` reads back to the same matrices (values written with 9 significant digits)."""
    feats, labels = data.features.tocsr(), data.labels.tocsr()
    with Path(path).open("w", encoding="utf-8") as out:
        out.write(f"{data.num_samples} {data.num_features} {data.num_labels}\n")
        for i in range(data.num_samples):
            lab = ",".join(str(int(c)) for c in labels.indices[labels.indptr[i] : labels.indptr[i + 1]])
            lo, hi = feats.indptr[i], feats.indptr[i + 1]
            ft = " ".join(
                f"{int(c)}:{float(v):.9g}" for c, v in zip(feats.indices[lo:hi], feats.data[lo:hi], strict=True)
            )
            out.write(f"{lab} {ft}".rstrip() + "\n" if lab or ft else "\n")
