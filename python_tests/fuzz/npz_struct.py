"""Structure-aware mutations of scipy ``.npz`` files, and the slow, obvious reference of what a reader
must accept.

Byte mutations rarely produce a well-formed zip whose arrays lie (the second sweep's CSC row index of
2**40 and CSR column of -2**40 were never reached), so these mutate the *members*: an index set to an
extreme value, a member's dtype or shape changed, ``format`` or ``shape`` replaced, a member dropped
or added; then the file is written with ``numpy.savez`` as any tool would. :func:`reference` decides
from the members alone, by the rules of scipy's formats written as plain loops, whether the file is
a valid matrix and which one; the reader must agree (accept exactly the valid ones, and read them
to that matrix).
"""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

MAX_DIM = 2**26
EXTREMES = [-(2**63), -(2**40), -1, 0, 1, 2, 3, 4, 5, 2**31 - 1, 2**31, 2**40, 2**63 - 1]
INDEX_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float64", "bool"]
DATA_DTYPES = ["float32", "float64", "float16", "int32", "uint64", "bool", "complex64", "datetime64[s]", "U3"]


def base_members(fmt: str, seed: int) -> dict[str, np.ndarray]:
    """The members ``save_npz`` writes for a small random matrix in ``fmt`` (csr, csc or coo)."""
    rng = np.random.default_rng(seed)
    dense = rng.integers(0, 3, size=(3, 4)).astype(np.float32) * rng.standard_normal((3, 4)).astype(np.float32)
    m = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "coo": sp.coo_matrix}[fmt](dense)
    buf = io.BytesIO()
    sp.save_npz(buf, m, compressed=False)
    with np.load(io.BytesIO(buf.getvalue())) as z:
        return {k: z[k] for k in z.files}


def _set_value(arrays: dict, name: str, pos: int, value: int) -> None:
    a = arrays.get(name)
    if a is None or a.ndim != 1 or a.size == 0:
        return
    wide = a.astype(object)
    wide[pos % a.size] = value
    try:
        arrays[name] = np.array(wide.tolist(), dtype=np.int64 if value < 2**63 else np.uint64)
    except OverflowError:
        arrays[name] = np.array(wide.tolist(), dtype=object)


def apply(arrays: dict[str, np.ndarray], op: tuple) -> dict[str, np.ndarray]:
    """One structured mutation ``(kind, member, a, b)`` of a copy of ``arrays``."""
    out = dict(arrays)
    kind, name, a, b = op
    if kind == "value":
        _set_value(out, name, a, EXTREMES[b % len(EXTREMES)])
    elif kind == "dtype" and name in out:
        with contextlib.suppress(TypeError, ValueError):
            out[name] = out[name].astype((DATA_DTYPES + INDEX_DTYPES)[b % (len(DATA_DTYPES) + len(INDEX_DTYPES))])
    elif kind == "reshape" and name in out and out[name].size:
        out[name] = out[name].reshape(1, -1) if b % 2 else out[name][: a % (out[name].size + 1)]
    elif kind == "format":
        out["format"] = [
            np.array(b"csr"),
            np.array(b"csc"),
            np.array(b"coo"),
            np.array(b"dia"),
            np.array(3),
            np.array("csr"),
            np.array([b"csr"]),
            np.array(b"\xff"),
        ][b % 8]
    elif kind == "shape":
        out["shape"] = [
            np.array([3, 4]),
            np.array([4, 3]),
            np.array([3, 2**40]),
            np.array([2**40, 4]),
            np.array([-3, 4]),
            np.array([3, 4, 5]),
            np.array([3.0, 4.0]),
            np.array([0, 0]),
            np.array([3, MAX_DIM + 1]),
            np.array([2**64 - 1, 4], dtype=np.uint64),
        ][b % 10]
    elif kind == "drop":
        out.pop(name, None)
    elif kind == "add":
        out[name if name not in out else "extra"] = np.arange(3)
    return out


def to_npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


MEMBERS = ["data", "indices", "indptr", "row", "col", "shape", "format", "_is_array"]


def ops() -> st.SearchStrategy:
    """Lists of 1-3 structured mutations."""
    op = st.tuples(
        st.sampled_from(["value", "value", "value", "dtype", "reshape", "format", "shape", "drop", "add"]),
        st.sampled_from(MEMBERS),
        st.integers(0, 64),
        st.integers(0, 64),
    )
    return st.lists(op, min_size=1, max_size=3)


def _int_array(a: object, ndim: int = 1) -> bool:
    return isinstance(a, np.ndarray) and a.ndim == ndim and a.dtype.kind in "iu"


def reference(arrays: dict[str, np.ndarray], total_bytes: int) -> np.ndarray | None:
    """The dense float32 matrix the members describe, or None if they are not a valid csr, csc or
    coo matrix within the readers' bounds (``total_bytes``: the members' inflated size)."""
    fmt = arrays.get("format")
    if not isinstance(fmt, np.ndarray) or fmt.ndim != 0 or fmt.dtype.kind not in "SU":
        return None
    name = fmt.item()
    if isinstance(name, bytes):
        name = name.decode("ascii", "replace")
    keys = set(arrays) - {"_is_array"}
    want = {
        "csr": {"format", "shape", "data", "indices", "indptr"},
        "csc": {"format", "shape", "data", "indices", "indptr"},
        "coo": {"format", "shape", "data", "row", "col"},
    }.get(name)
    if want is None or keys != want:
        return None
    shape = arrays["shape"]
    if not _int_array(shape) or shape.shape != (2,):
        return None
    rows, cols = int(shape[0]), int(shape[1])
    if rows < 0 or cols < 0 or cols > MAX_DIM or rows > total_bytes + (1 << 16):
        return None
    data = arrays["data"]
    if not isinstance(data, np.ndarray) or data.ndim != 1 or data.dtype.kind not in "biuf":
        return None
    vals = [float(np.float32(v)) for v in data.tolist()]
    if not all(math.isfinite(v) for v in vals):
        return None
    dense = np.zeros((rows, cols), dtype=np.float64) if rows * cols <= 1 << 20 else None
    entries = []
    if name in ("csr", "csc"):
        ptr, idx = arrays["indptr"], arrays["indices"]
        if not _int_array(ptr) or not _int_array(idx):
            return None
        major, minor = (rows, cols) if name == "csr" else (cols, rows)
        p, ix = [int(v) for v in ptr.tolist()], [int(v) for v in idx.tolist()]
        if len(p) != major + 1 or p[0] != 0 or p[-1] != len(vals) or len(ix) != len(vals):
            return None
        for r in range(major):
            if p[r + 1] < p[r]:
                return None
            for q in range(p[r], p[r + 1]):
                if not 0 <= ix[q] < minor:
                    return None
                entries.append((r, ix[q], vals[q]) if name == "csr" else (ix[q], r, vals[q]))
    else:
        row, col = arrays["row"], arrays["col"]
        if not _int_array(row) or not _int_array(col) or row.size != len(vals) or col.size != len(vals):
            return None
        for r, c, v in zip(row.tolist(), col.tolist(), vals, strict=True):
            if not (0 <= r < rows and 0 <= c < cols):
                return None
            entries.append((int(r), int(c), v))
    if dense is None:
        return None  # too large to compare here; no mutation yields such a valid file
    for r, c, v in entries:
        dense[r, c] += v
    out = dense.astype(np.float32)
    return out if np.isfinite(out).all() else None
