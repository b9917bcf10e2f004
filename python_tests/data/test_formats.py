"""The libsvm multi-label and scipy .npz readers, on small files the tests write."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedkernels.data import load_dataset, read_any, read_libsvm, read_npz, read_xc

# The same 3 samples as XC text (header, 0-based features) and as libsvm (no header, 1-based features).
XC = "3 4 3\n0,2 0:1 3:0.5\n 1:2\n1 2:1.5 2:1\n"
LIBSVM = "0,2 1:1 4:0.5\n 2:2   # no labels\n1 3:1.5 3:1\n"


def test_libsvm_differs_from_xc_only_by_header_and_one_based_features(tmp_path):
    (tmp_path / "a.txt").write_text(XC)
    (tmp_path / "b.svm").write_text(LIBSVM)
    a, b = read_xc(tmp_path / "a.txt"), read_libsvm(tmp_path / "b.svm")
    assert (a.features != b.features).nnz == 0 and (a.labels != b.labels).nnz == 0
    assert b.features.shape == (3, 4) and b.labels.shape == (3, 3)
    assert b.features.toarray()[2].tolist() == [0, 0, 2.5, 0]  # duplicates add up, as in read_xc
    assert read_any(tmp_path / "b.svm").features.shape == (3, 4)  # no header -> libsvm
    assert read_any(tmp_path / "a.txt").num_labels == 3


def test_libsvm_zero_based_and_sizes(tmp_path):
    p = tmp_path / "z.svm"
    p.write_text("1 0:1 2:1\n0 1:3\n")
    d = read_libsvm(p)  # a feature 0 occurs: auto reads it 0-based
    assert d.features.toarray().tolist() == [[1, 0, 1], [0, 3, 0]]
    assert read_libsvm(p, num_features=10, num_labels=5).features.shape == (2, 10)
    with pytest.raises(ValueError, match="feature id 0 in a file read as 1-based"):
        read_libsvm(p, zero_based=False)
    with pytest.raises(ValueError, match="label id 1 out of range for num_labels=1"):
        read_libsvm(p, num_labels=1)
    (tmp_path / "bad.svm").write_text("0 1:x\n")
    with pytest.raises(ValueError, match=r"bad\.svm:1: bad feature value"):
        read_libsvm(tmp_path / "bad.svm")


def test_npz_pair_stays_sparse(tmp_path):
    x = sp.random(6, 50, density=0.1, format="csr", random_state=0, dtype=np.float64)
    y = sp.csr_matrix(np.array([[1, 0, 2], [0, 0, 0], [0, 1, 0], [1, 1, 1], [0, 0, 1], [3, 0, 0]]))
    sp.save_npz(tmp_path / "train_X.npz", x)
    sp.save_npz(tmp_path / "train_Y.npz", y.tocoo())  # any sparse format scipy saves
    d = read_npz(tmp_path / "train_X.npz", tmp_path / "train_Y.npz")
    assert sp.isspmatrix_csr(d.features) and d.features.dtype == np.float32
    assert np.allclose(d.features.toarray(), x.toarray())
    assert d.labels.toarray().tolist() == (y.toarray() > 0).astype(float).tolist()
    assert read_any(tmp_path / "train_X.npz").num_samples == 6
    sp.save_npz(tmp_path / "short_Y.npz", y[:4])
    with pytest.raises(ValueError, match=r"has 6 rows but labels .* has 4"):
        read_npz(tmp_path / "train_X.npz", tmp_path / "short_Y.npz")
    (tmp_path / "junk_X.npz").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"not a scipy sparse \.npz"):
        read_npz(tmp_path / "junk_X.npz", tmp_path / "train_Y.npz")


def test_load_dataset_reads_npz_and_libsvm_folders(tmp_path):
    npz = tmp_path / "npz"
    npz.mkdir()
    x = sp.random(10, 7, density=0.3, format="csr", random_state=1)
    y = sp.csr_matrix((np.arange(10)[:, None] % 3 == np.arange(3)).astype(np.float32))
    for part in ("train", "test"):
        sp.save_npz(npz / f"{part}_X.npz", x)
        sp.save_npz(npz / f"{part}_Y.npz", y)
    ds = load_dataset(npz)
    assert (len(ds.train), len(ds.test), ds.num_features, ds.num_classes) == (10, 10, 7, 3)
    svm = tmp_path / "svm"
    svm.mkdir()
    (svm / "all.svm").write_text(LIBSVM * 4)
    ds = load_dataset(svm, test_fraction=0.25)
    assert (len(ds.train), len(ds.test), ds.num_features, ds.num_classes) == (9, 3, 4, 3)


def test_write_xc_round_trip(tmp_path):
    from fedkernels.data import write_xc

    (tmp_path / "a.txt").write_text("4 4 3\n0,2 0:1 3:0.5\n 1:2\n1 2:1.5 2:1\n\n")
    a = read_xc(tmp_path / "a.txt")
    write_xc(a, tmp_path / "b.txt")
    b = read_xc(tmp_path / "b.txt")
    assert (a.features != b.features).nnz == 0 and (a.labels != b.labels).nnz == 0 and b.num_samples == 4
