"""The XC-format reader, feature hashing and the train/test split."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels import HashFamily
from fedkernels.data import hash_features, idf_weights, load_dataset, read_xc, train_test_split
from python_tests.reference import data_ref
from python_tests.support.real_data import dataset

BIBTEX, STACKEX_CS = dataset("bibtex"), dataset("stackex_cs")

HANDMADE = """5 6 4
0,2 0:1 3:0.5
 1:2 5:1

3 2:1.5
1,1,3 0:1 0:2
"""


def test_reader_handmade(tmp_path):
    p = tmp_path / "train.txt"
    p.write_text(HANDMADE)
    d = read_xc(p)
    assert d.features.shape == (5, 6) and d.labels.shape == (5, 4)
    labels = [sorted(d.labels[i].indices.tolist()) for i in range(5)]
    assert labels == [[0, 2], [], [], [3], [1, 3]]  # duplicate label 1 collapses
    dense = d.features.toarray()
    assert dense[0].tolist() == [1, 0, 0, 0.5, 0, 0]
    assert dense[1].tolist() == [0, 2, 0, 0, 0, 1]
    assert dense[2].tolist() == [0] * 6  # the empty line is a sample with nothing
    assert dense[4, 0] == 3  # duplicate feature ids add up
    assert d.features.dtype == np.float32


@pytest.mark.parametrize(
    "text, match",
    [
        ("2 3\n", "header"),
        ("1 3 2\n5 0:1\n", "label id 5 out of range"),
        ("1 3 2\n0 7:1\n", "feature id 7 out of range"),
        ("1 3 2\n0 1-1\n", "bad feature"),
        ("1 3 2\n0 1:x\n", "bad feature value"),
        ("3 3 2\n0 1:1\n", "N=3"),
        ("", "empty file"),
    ],
)
def test_reader_rejects(tmp_path, text, match):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_xc(p)


def _xc_text(rows_labels, rows_feats, f, l):
    lines = [f"{len(rows_labels)} {f} {l}"]
    for lab, fs in zip(rows_labels, rows_feats, strict=True):
        lines.append(",".join(map(str, lab)) + " " + " ".join(f"{k}:{v}" for k, v in fs))
    return "\n".join(lines) + "\n"


@given(st.integers(1, 12), st.integers(1, 9), st.data())
def test_reader_and_hashing_match_reference(f, l, data):
    n = data.draw(st.integers(0, 8))
    labs = [data.draw(st.lists(st.integers(0, l - 1), max_size=4)) for _ in range(n)]
    fs = [
        data.draw(st.lists(st.tuples(st.integers(0, f - 1), st.sampled_from([1, 0.5, 2.25, -3])), max_size=5))
        for _ in range(n)
    ]
    text = _xc_text(labs, fs, f, l)
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "x.txt"
        p.write_text(text)
        d = read_xc(p)
    (rn, rf, rl), ref_labels, ref_feats = data_ref.parse_xc(text)
    assert d.features.shape == (rn, rf) and d.labels.shape == (rn, rl)
    assert [set(d.labels[i].indices.tolist()) for i in range(n)] == ref_labels
    want_dense = np.zeros((n, f))
    for i, row in enumerate(ref_feats):
        for k, v in row.items():
            want_dense[i, k] = v
    np.testing.assert_allclose(d.features.toarray(), want_dense, rtol=1e-6)
    dim = data.draw(st.integers(1, 7))
    seed = data.draw(st.integers(0, 2**40))
    l2 = data.draw(st.booleans())
    idf = idf_weights(d.features) if data.draw(st.booleans()) else None
    got = hash_features(d.features, dim, seed, idf, l2)
    hf = HashFamily(1, dim, seed)
    bucket = hf.buckets(torch.arange(f))[:, 0].tolist()
    sign = hf.sign(torch.arange(f))[:, 0].tolist()
    want = [data_ref.hash_row(r, bucket, sign, dim, idf, l2) for r in ref_feats]
    assert got.dtype == torch.float32 and got.shape == (n, dim)
    if n:
        np.testing.assert_allclose(got.numpy(), np.array(want), rtol=1e-5, atol=1e-6)


@given(st.lists(st.integers(0, 2**40 - 1), min_size=0, max_size=12), st.integers(1, 9), st.integers(0, 2**32))
@settings(deadline=None)
def test_hashing_a_huge_declared_width_hashes_only_the_features_used(ids, dim, seed):
    """A header may declare 2^40 columns: hashing costs what the rows hold, and each used id (duplicates
    in a row add up) lands in its bucket with its sign, as the per-feature reference says."""
    x = sp.csr_matrix(
        (np.linspace(0.5, 2.0, len(ids)).astype(np.float32), np.array(ids, dtype=np.int64), [0, len(ids)]),
        shape=(1, 2**40),
    )
    got = hash_features(x, dim, seed)
    hf = HashFamily(1, dim, seed)
    used = torch.tensor(sorted(set(ids)), dtype=torch.int64)
    buckets = dict(zip(used.tolist(), hf.buckets(used)[:, 0].tolist(), strict=True)) if len(used) else {}
    signs = dict(zip(used.tolist(), hf.sign(used)[:, 0].tolist(), strict=True)) if len(used) else {}
    row: dict[int, float] = {}
    for fid, v in zip(ids, x.data.tolist(), strict=True):
        row[fid] = row.get(fid, 0.0) + v
    want = data_ref.hash_row(row, buckets, signs, dim)  # type: ignore[arg-type]
    np.testing.assert_allclose(got.numpy(), np.array([want]), rtol=1e-6, atol=1e-6)


def test_hashing_errors_and_determinism():
    x = sp.csr_matrix(np.eye(4, dtype=np.float32))
    assert torch.equal(hash_features(x, 3, seed=5), hash_features(x, 3, seed=5))
    with pytest.raises(ValueError, match="dim"):
        hash_features(x, 0)
    with pytest.raises(ValueError, match="idf"):
        hash_features(x, 3, idf=np.ones(2))


def test_split_reproducible_and_disjoint():
    tr, te = train_test_split(101, 0.3, seed=7)
    assert len(te) == 30 and len(tr) == 71
    assert sorted(np.concatenate([tr, te]).tolist()) == list(range(101))
    tr2, te2 = train_test_split(101, 0.3, seed=7)
    assert np.array_equal(tr, tr2) and np.array_equal(te, te2)
    assert not np.array_equal(te, train_test_split(101, 0.3, seed=8)[1])
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split(10, 1.5)


@pytest.mark.real_data("bibtex")
def test_bibtex_header_counts():
    d = read_xc(BIBTEX / "train.txt")
    assert (d.num_samples, d.num_features, d.num_labels) == (4880, 1836, 159)
    assert 2.0 < d.labels.nnz / d.num_samples < 3.0  # README: 2.4 labels per sample


@pytest.mark.real_data("stackex_cs")
def test_load_all_txt_split():
    ds = load_dataset(STACKEX_CS, seed=3, test_fraction=0.25, feature_dim=64)
    assert len(ds.train) + len(ds.test) == 9270 and len(ds.test) == round(0.25 * 9270)
    assert ds.num_features == 64 and ds.num_classes == 274
    norms = ds.train.x.norm(dim=1)
    assert torch.allclose(norms[norms > 0], torch.ones_like(norms[norms > 0]), atol=1e-5)


def test_load_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="XC-format"):
        load_dataset(tmp_path)
