"""Untrusted data files (issue "No file, node or flag can crash a run", the second hostile sweep):
every field of a scipy ``.npz`` is checked before scipy or the loaders see it (a CSC row index of
2**40 crashed ``read_npz`` with SIGSEGV; a CSR column of +-2**40 was accepted and crashed the dense
and hashed loads; ``format`` stored as an int, complex and datetime values), text files that are not
UTF-8 name the file and line, and FIFOs, devices and directories are refused by type before they are
opened (a FIFO hung the reader, ``/dev/zero`` ate memory)."""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from fedkernels.data import load_xc_dataset, read_any, read_filter, read_libsvm, read_npz, read_sparse_text, read_xc
from python_tests.support.fifo import FifoReleaser

GOOD_X = sp.csr_matrix(np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]], dtype=np.float32))
GOOD_Y = sp.csr_matrix(np.array([[1, 0], [0, 1]], dtype=np.float32))


def npz_bytes(**arrays: object) -> bytes:
    """A ``.npz`` holding exactly ``arrays`` (what a crafted file can hold: any member, any dtype)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def members(m: sp.spmatrix) -> dict[str, object]:
    """The members ``scipy.sparse.save_npz`` writes for ``m``."""
    buf = io.BytesIO()
    sp.save_npz(buf, m, compressed=False)
    with np.load(io.BytesIO(buf.getvalue())) as z:
        return {k: z[k] for k in z.files}


def write_pair(tmp_path, x: bytes, y: bytes | None = None):
    fx, fy = tmp_path / "d_X.npz", tmp_path / "d_Y.npz"
    fx.write_bytes(x)
    if y is None:
        buf = io.BytesIO()
        sp.save_npz(buf, GOOD_Y)
        y = buf.getvalue()
    fy.write_bytes(y)
    return fx, fy


def edited(m: sp.spmatrix, **changes: object) -> bytes:
    arrays = members(m)
    arrays.update(changes)
    return npz_bytes(**{k: v for k, v in arrays.items() if v is not None})


HOSTILE_NPZ = {
    # a CSC row index of 2**40: a SIGSEGV inside scipy unless read_npz checks the indices first
    "csc row 2**40": (edited(GOOD_X.tocsc(), indices=np.array([0, 1 << 40, 0], dtype=np.int64)), "indices values"),
    # unchecked, it would crash the dense load and the feature_dim hashing
    "csr column 2**40": (edited(GOOD_X, indices=np.array([0, 2, 1 << 40], dtype=np.int64)), "indices values"),
    "csr column -2**40": (edited(GOOD_X, indices=np.array([0, -(1 << 40), 1], dtype=np.int64)), "indices values"),
    "uint64 column 2**64-1": (
        edited(GOOD_X, indices=np.array([0, 2, 2**64 - 1], dtype=np.uint64)),
        "indices values",
    ),
    "coo row past the shape": (edited(GOOD_X.tocoo(), row=np.array([0, 0, 7], dtype=np.int32)), "row values"),
    "format an int": (edited(GOOD_X, format=np.array(3)), "'format' must be a string"),
    "format dia": (edited(GOOD_X, format=np.array(b"dia")), "format 'dia' is not one of"),
    "complex values": (edited(GOOD_X, data=np.array([1 + 2j, 2, 3], dtype=np.complex64)), "real numbers"),
    "datetime values": (
        edited(GOOD_X, data=np.array([1, 2, 3], dtype="datetime64[s]")),
        "real numbers",
    ),
    "string values": (edited(GOOD_X, data=np.array(["a", "b", "c"])), "real numbers"),
    "indptr decreasing": (edited(GOOD_X, indptr=np.array([0, 3, 2], dtype=np.int32)), "indptr"),
    "indptr short": (edited(GOOD_X, indptr=np.array([0, 3], dtype=np.int32)), "indptr must have 3 entries"),
    "indptr past nnz": (edited(GOOD_X, indptr=np.array([0, 2, 4], dtype=np.int32)), "indptr"),
    "float indices": (edited(GOOD_X, indices=np.array([0.0, 2.0, 1.0])), "integer array"),
    "shape of three": (edited(GOOD_X, shape=np.array([2, 3, 4])), "'shape' must be two integers"),
    "negative shape": (edited(GOOD_X, shape=np.array([-2, 3])), "negative"),
    "missing indices": (edited(GOOD_X, indices=None), "holds"),
    "unknown member": (edited(GOOD_X, evil=np.zeros(3)), "not part of a scipy sparse"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_NPZ))
def test_hostile_npz_is_a_value_error_naming_the_file(tmp_path, case):
    data, needle = HOSTILE_NPZ[case]
    fx, fy = write_pair(tmp_path, data)
    with pytest.raises(ValueError, match=f"{fx}.*{needle}") as e:
        read_npz(fx, fy)
    assert type(e.value) is ValueError


def test_hostile_npz_never_reaches_the_dense_or_hashed_loads(tmp_path):
    """The sweep's CSR column of 2**40 passed read_npz and crashed both loads: now the reader stops it."""
    data, _ = HOSTILE_NPZ["csr column 2**40"]
    folder = tmp_path / "ds"
    folder.mkdir()
    write_pair(folder, data)
    (folder / "all_X.npz").write_bytes((folder / "d_X.npz").read_bytes())
    (folder / "all_Y.npz").write_bytes((folder / "d_Y.npz").read_bytes())
    for kw in ({}, {"feature_dim": 8}, {"sparse": True}):
        with pytest.raises(ValueError, match="indices values"):
            load_xc_dataset(folder, **kw)


@pytest.mark.parametrize(
    "m",
    [GOOD_X, GOOD_X.tocsc(), GOOD_X.tocoo(), sp.csr_array(GOOD_X), sp.csr_matrix(GOOD_X, dtype=np.float64)],
    ids=["csr", "csc", "coo", "csr_array", "float64"],
)
def test_valid_npz_of_every_format_still_reads(tmp_path, m):
    buf = io.BytesIO()
    sp.save_npz(buf, m)
    fx, fy = write_pair(tmp_path, buf.getvalue())
    d = read_npz(fx, fy)
    assert d.features.dtype == np.float32 and (d.features != GOOD_X).nnz == 0
    assert (d.labels != GOOD_Y).nnz == 0


def test_non_utf8_text_names_the_file_and_line(tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes(b"2 4 3\n0 0:1\n1 2:1 # caf\xe9\n")
    for read in (read_xc, read_any):
        with pytest.raises(ValueError, match=rf"{f}:3: not UTF-8 text \(byte 0xe9 at column 12"):
            read(f)
    g = tmp_path / "latin1.svm"
    g.write_bytes(b"0 1:1\n1 2:1 # caf\xe9\n")
    for read in (read_libsvm, read_any):
        with pytest.raises(ValueError, match=rf"{g}:2: not UTF-8 text \(byte 0xe9"):
            read(g)


def _fifo(tmp_path):
    path = tmp_path / "fifo.txt"
    os.mkfifo(path)
    return path


READERS = {
    "read_xc": read_xc,
    "read_libsvm": read_libsvm,
    "read_any": read_any,
    "read_npz X": lambda p: read_npz(p, p),
    # the LF-* readers opened their files with Path.open: a FIFO hung them (third sweep)
    "read_sparse_text": read_sparse_text,
    "read_filter": lambda p: read_filter(p, 3, 4),
}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_special_files_are_refused_by_type_before_reading(tmp_path, reader, kind):
    if kind == "fifo":
        path = _fifo(tmp_path)
    elif kind == "dev_zero":
        path = "/dev/zero"
    else:
        path = tmp_path / "a_dir"
        path.mkdir()
    if reader == "read_npz X" and kind == "directory":
        path = tmp_path / "a_dir_X.npz"
        path.mkdir()
    words = {"fifo": "FIFO", "dev_zero": "character device", "directory": "directory"}[kind]
    # The releaser unblocks a reader that opened the FIFO (which then fails here, not hangs the run)
    # and tells whether one did; a refusal by type never opens it.
    with FifoReleaser(path) as releaser, pytest.raises(ValueError, match=f"{path} is a {words}"):
        READERS[reader](path)
    assert not releaser.found_a_reader


def test_symlink_to_a_regular_file_still_reads(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("1 2 2\n0 1:1\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    assert read_xc(link).num_samples == 1


def test_xc_with_more_lines_than_its_header_stops_at_the_first_extra(tmp_path):
    f = tmp_path / "more.txt"
    f.write_text("1 2 2\n0 1:1\n1 0:1\n" + "0 1:1\n" * 1000)
    with pytest.raises(ValueError, match=f"{f}:3: header says N=1"):
        read_xc(f)


def test_zip_member_named_twice_is_refused(tmp_path):
    buf = io.BytesIO()
    sp.save_npz(buf, GOOD_X, compressed=False)
    raw = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(raw, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
        with pytest.warns(UserWarning, match="Duplicate name"):
            dst.writestr("indices.npy", src.read("indices.npy"))
    fx, fy = write_pair(tmp_path, raw.getvalue())
    with pytest.raises(ValueError, match="appears 2 times"):
        read_npz(fx, fy)
