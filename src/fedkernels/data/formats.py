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

import math
import struct
import zipfile
import zlib
from array import array
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._files import open_regular
from .xc_format import (
    MAX_DIM,
    XCData,
    _parse_header,
    _parse_line,
    check_parsed,
    first_line,
    parse_budget,
    read_xc,
    text_lines,
)


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
    lab_ptr, feat_ptr, labels, feat_ids = array("q", [0]), array("q", [0]), array("q"), array("q")
    feat_vals = array("d")
    for arg, value in (("num_features", num_features), ("num_labels", num_labels)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DIM):
            raise ValueError(f"{arg} must be an integer in [0, {MAX_DIM}] or None, got {value!r}")
    budget = parse_budget()
    for lineno, line in text_lines(path):
        line = line.split("#", 1)[0].rstrip()
        if not line:
            continue  # blank lines and comment lines are not samples in libsvm files
        _parse_line(line, lineno, path, MAX_DIM, MAX_DIM, labels, feat_ids, feat_vals)  # ids < 2**26
        lab_ptr.append(len(labels))
        feat_ptr.append(len(feat_ids))
        check_parsed(len(labels) + 2 * len(feat_ids) + 2 * len(lab_ptr), budget, path, lineno)
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

    Every field is checked before anything is converted or allocated from it: the zip's members
    (known names, sizes within deflate's ratio, ``.npy`` headers within their member), ``format`` a
    string naming csr, csc or coo, ``shape`` two non-negative integers (at most ``MAX_DIM`` columns,
    rows bounded by the file's size), values of a real dtype (no complex, datetime, text or object),
    index arrays of an integer dtype with every value inside the shape, pointers from 0 to nnz and
    never decreasing. A FIFO, device or directory is refused by type before it is opened.

    Raises:
        ValueError: naming the file and what is wrong with it: any of the above, X and Y with
            different N, or non-finite values (also values beyond float32).
        FileNotFoundError: a file is missing.
    """
    x = _load_sparse(Path(features), "features")
    y = _load_sparse(Path(labels), "labels")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"features {features} has {x.shape[0]} rows but labels {labels} has {y.shape[0]}")
    if not np.isfinite(x.data).all():
        raise ValueError(f"features {features}: NaN or inf values (or beyond float32)")
    x.sum_duplicates()
    if not np.isfinite(y.data).all():  # a NaN is not a 0/1 label (it would count as one)
        raise ValueError(f"labels {labels}: NaN or inf values (or beyond float32)")
    y.sum_duplicates()
    y.eliminate_zeros()
    y.data[:] = 1.0
    return XCData(x, y)


NPZ_MAX_RATIO = 1032
"""Deflate's largest compression ratio: a zip member claiming to inflate to more than this many times
its compressed bytes (plus 1 KiB) is lying, and is refused before it is inflated."""

NPZ_FORMATS = ("csr", "csc", "coo")
"""The sparse formats :func:`read_npz` reads (what ``scipy.sparse.save_npz`` writes for them)."""

# The members each format's file holds (``_is_array`` is optional: scipy writes it for sparse arrays).
_NPZ_MEMBERS = {
    "csr": {"format", "shape", "data", "indices", "indptr"},
    "csc": {"format", "shape", "data", "indices", "indptr"},
    "coo": {"format", "shape", "data", "row", "col"},
}
_NPZ_KNOWN = {"format", "shape", "data", "indices", "indptr", "row", "col", "coords", "_is_array"}
# dtype kinds a values array may have: bool, signed, unsigned, float (not complex, datetime, text, object).
_VALUE_KINDS = "biuf"

# What a malformed zip or .npy raises besides ValueError (zipfile, zlib, numpy's header parser).
_NPZ_ERRORS = (
    KeyError,
    OSError,
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    struct.error,
    SyntaxError,
    TypeError,
    IndexError,
    OverflowError,
    RuntimeError,
)


def _read_npz_members(z: zipfile.ZipFile, path: Path, what: str) -> tuple[dict[str, np.ndarray], int]:
    """Every member of a scipy ``.npz`` as an array, each claim checked before it is inflated: the
    member's name (known, once), its size against deflate's ratio, and its ``.npy`` header's shape
    times item size against the member's size (numpy allocates the array from the header before
    reading it); no object arrays (``allow_pickle=False``). Returns the arrays and their total
    inflated bytes (at most ``NPZ_MAX_RATIO`` x the file)."""
    infos = z.infolist()
    names = [i.filename for i in infos]
    for name in names:
        stem = name[: -len(".npy")] if name.endswith(".npy") else None
        if stem not in _NPZ_KNOWN:
            raise ValueError(f"{what} {path}: member {name!r} is not part of a scipy sparse .npz")
        if names.count(name) > 1:
            raise ValueError(f"{what} {path}: member {name!r} appears {names.count(name)} times")
    total = 0
    for info in infos:
        if info.file_size > NPZ_MAX_RATIO * info.compress_size + 1024:
            raise ValueError(
                f"{what} {path}: member {info.filename!r} claims {info.file_size} bytes from "
                f"{info.compress_size} compressed (more than deflate's ratio {NPZ_MAX_RATIO})"
            )
        total += info.file_size
        with z.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"{what} {path}: member {info.filename!r} has .npy version {version}")
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
        need = math.prod(shape) * dtype.itemsize
        if dtype.hasobject or need > info.file_size:
            raise ValueError(
                f"{what} {path}: member {info.filename!r} claims shape {shape} of {dtype} ({need} bytes) "
                f"in {info.file_size} bytes"
            )
    arrays = {}
    for info in infos:
        with z.open(info) as f:
            arrays[info.filename[: -len(".npy")]] = np.lib.format.read_array(f, allow_pickle=False)
    return arrays, total


def _index_array(a: np.ndarray, name: str, upper: int, where: str) -> np.ndarray:
    """``a`` as int64 if it is a 1-D integer array with every value in ``[0, upper)``; compared in its
    own dtype, so uint64 values past 2**63 are refused, never wrapped."""
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(f"{where}: {name} must be a 1-D integer array, got {a.dtype} of shape {a.shape}")
    if a.size and (a.min() < 0 or a.max() >= upper):
        raise ValueError(f"{where}: {name} values must lie in [0, {upper}), got min {a.min()} and max {a.max()}")
    return a.astype(np.int64, copy=False)


def _pointer_array(a: np.ndarray, name: str, length: int, nnz: int, where: str) -> np.ndarray:
    """A compressed-format pointer: ``length`` entries from 0 to ``nnz``, never decreasing."""
    p = _index_array(a, name, nnz + 1, where)
    if p.size != length:
        raise ValueError(f"{where}: {name} must have {length} entries, got {p.size}")
    if p[0] != 0 or p[-1] != nnz:
        raise ValueError(f"{where}: {name} must run from 0 to nnz = {nnz}, got {p[0]} ... {p[-1]}")
    if (np.diff(p) < 0).any():
        raise ValueError(f"{where}: {name} must be non-decreasing")
    return p


def _sparse_from_arrays(arrays: dict[str, np.ndarray], total: int, where: str) -> sp.csr_matrix:
    """A float32 CSR matrix from the members of a scipy ``.npz``, every field checked against the
    format's rules before scipy sees it: format a string naming a known format, shape two integers
    within the bounds, values of a real dtype, every index in range, pointers monotone from 0 to nnz."""
    fmt = arrays.get("format")
    if fmt is None or fmt.ndim != 0 or fmt.dtype.kind not in "SU":
        got = "missing" if fmt is None else f"{fmt.dtype} of shape {fmt.shape}"
        raise ValueError(f"{where}: 'format' must be a string ({', '.join(NPZ_FORMATS)}), got {got}")
    name = fmt.item()
    name = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
    if name not in NPZ_FORMATS:
        raise ValueError(f"{where}: format {name!r} is not one of {', '.join(NPZ_FORMATS)}")
    want = _NPZ_MEMBERS[name]
    if name == "coo" and "coords" in arrays and "row" not in arrays:
        want = {"format", "shape", "data", "coords"}
    got_members = set(arrays) - {"_is_array"}
    if got_members != want:
        raise ValueError(f"{where}: a {name} .npz holds {sorted(want)}, got {sorted(got_members)}")
    shape = arrays["shape"]
    if shape.shape != (2,) or shape.dtype.kind not in "iu":
        raise ValueError(f"{where}: 'shape' must be two integers, got {shape.dtype} of shape {shape.shape}")
    if shape.min() < 0:
        raise ValueError(f"{where}: shape {tuple(shape.tolist())} has a negative size")
    rows, cols = (int(v) for v in shape)
    if cols > MAX_DIM:
        raise ValueError(f"{where}: {cols} columns exceed the bound {MAX_DIM} (2**26)")
    if rows > total + (1 << 16):  # a CSR row pointer is O(rows): it must be O(the file)
        raise ValueError(f"{where}: shape {(rows, cols)} is implausible for a file of {total} inflated bytes")
    data = arrays["data"]
    if data.ndim != 1 or data.dtype.kind not in _VALUE_KINDS:
        raise ValueError(f"{where}: 'data' must be a 1-D array of real numbers, got {data.dtype} of shape {data.shape}")
    nnz = data.size
    if name in ("csr", "csc"):
        major, minor = (rows, cols) if name == "csr" else (cols, rows)
        indptr = _pointer_array(arrays["indptr"], "indptr", major + 1, nnz, where)
        indices = _index_array(arrays["indices"], "indices", minor, where)
        if indices.size != nnz:
            raise ValueError(f"{where}: indices has {indices.size} entries but data has {nnz}")
        make = sp.csr_matrix if name == "csr" else sp.csc_matrix
        m = make((data, indices, indptr), shape=(rows, cols))
    else:
        if "coords" in want:
            coords = arrays["coords"]
            if coords.ndim != 2 or coords.shape[0] != 2:
                raise ValueError(f"{where}: coords must be [2, nnz], got shape {coords.shape}")
            row_raw, col_raw = coords[0], coords[1]
        else:
            row_raw, col_raw = arrays["row"], arrays["col"]
        row = _index_array(row_raw, "row", rows, where)
        col = _index_array(col_raw, "col", cols, where)
        if row.size != nnz or col.size != nnz:
            raise ValueError(
                f"{where}: row and col must have one entry per value ({nnz}), got {row.size} and {col.size}"
            )
        m = sp.coo_matrix((data, (row, col)), shape=(rows, cols))
    return sp.csr_matrix(m, dtype=np.float32)


def _load_sparse(path: Path, what: str) -> sp.csr_matrix:
    """A float32 CSR matrix from the scipy ``.npz`` at ``path`` (a regular file: refused by type before
    it is opened), every claim checked before it is allocated (:func:`_read_npz_members`) and every
    field before it is converted (:func:`_sparse_from_arrays`). Memory: O(the members' inflated
    bytes), themselves at most ``NPZ_MAX_RATIO`` x the file."""
    where = f"{what} {path}"
    try:
        with open_regular(path, what) as f, zipfile.ZipFile(f) as z:
            arrays, total = _read_npz_members(z, path, what)
    except FileNotFoundError:
        raise
    except ValueError as e:
        raise ValueError(e if str(path) in str(e) else f"{where}: not a scipy sparse .npz ({e})") from None
    except _NPZ_ERRORS as e:
        raise ValueError(f"{where}: not a scipy sparse .npz ({type(e).__name__}: {e})") from None
    return _sparse_from_arrays(arrays, total, where)


def read_any(path: str | Path) -> XCData:
    """Read one file of samples by its kind: ``<stem>_X.npz`` (with ``<stem>_Y.npz`` beside it), an XC
    text file (first line ``N F L``) or a libsvm multi-label text file."""
    path = Path(path)
    if path.suffix == ".npz":
        stem = path.name[: -len("_X.npz")] if path.name.endswith("_X.npz") else None
        if stem is None:
            raise ValueError(f"{path}: an .npz dataset is a pair <stem>_X.npz (features) and <stem>_Y.npz (labels)")
        return read_npz(path, path.with_name(f"{stem}_Y.npz"))
    try:
        _parse_header(first_line(path), path)
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
