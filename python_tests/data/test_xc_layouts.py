"""The papers' datasets by name, in the Extreme Classification Repository's layouts, from small generated
files zipped exactly as the repository lays them out (fetched with --url file://, no network): the LF-*
split files with their filter files, a "BoW features" zip (Amazon670K.bow/train.txt), and the older
<stem>_train.txt zips (EURLex-4K, Wiki10-31K). Plus the readers' checks of what a file claims."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fedkernels.data import load_dataset, remote_datasets
from fedkernels.data.xc_layouts import find_layout, read_filter, read_sparse_text
from fedkernels.metrics import filter_predictions
from fedkernels_cli import main


def sparse_text(m: sp.csr_matrix) -> str:
    """The repository's sparse text form: header ``N C``, then ``col:value`` per row."""
    m = sp.csr_matrix(m)
    lines = [f"{m.shape[0]} {m.shape[1]}"]
    for i in range(m.shape[0]):
        lo, hi = m.indptr[i], m.indptr[i + 1]
        lines.append(" ".join(f"{c}:{v:.6g}" for c, v in zip(m.indices[lo:hi], m.data[lo:hi], strict=True)))
    return "\n".join(lines) + "\n"


def xc_text(x: sp.csr_matrix, y: sp.csr_matrix) -> str:
    """The XC text format: header ``N F L``, then ``l1,l2 f:v ...``."""
    lines = [f"{x.shape[0]} {x.shape[1]} {y.shape[1]}"]
    for i in range(x.shape[0]):
        labs = ",".join(str(c) for c in y.indices[y.indptr[i] : y.indptr[i + 1]])
        lo, hi = x.indptr[i], x.indptr[i + 1]
        feats = " ".join(f"{c}:{v:.6g}" for c, v in zip(x.indices[lo:hi], x.data[lo:hi], strict=True))
        lines.append(f"{labs} {feats}")
    return "\n".join(lines) + "\n"


def random_split(rng: np.random.Generator, n: int, f: int, labels: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    x = sp.random(n, f, density=0.3, format="csr", random_state=rng, dtype=np.float32)
    x.data = np.round(x.data, 3) + 0.5
    y = sp.random(n, labels, density=0.2, format="csr", random_state=rng)
    y.data[:] = 1.0
    y.sort_indices()
    return x, y


def zip_bytes(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(root))
    return root


def get(name: str, archive: bytes, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.zip"
    path.write_bytes(archive)
    assert main(["data", "get", name, "--no-progress", "--url", path.as_uri()]) == 0


def assert_loaded(ds, x, y) -> None:
    got_x = ds.x.to_dense() if ds.x.layout == torch.sparse_csr else ds.x
    assert torch.allclose(got_x, torch.from_numpy(x.toarray()).float(), atol=1e-6)
    assert ds.indptr.tolist() == y.indptr.tolist() and ds.indices.tolist() == y.indices.tolist()


@pytest.mark.parametrize("name", ["LF-AmazonTitles-131K", "LF-WikiSeeAlsoTitles-320K"])
def test_lf_split_layout_with_filters(name, cache, tmp_path):
    rng = np.random.default_rng(0)
    (xtr, ytr), (xte, yte) = random_split(rng, 7, 6, 9), random_split(rng, 5, 6, 9)
    # the reciprocal pairs: test document 0 and 3 are labels 2 and 4 themselves
    archive = zip_bytes(
        {
            f"{name}/trn_X_Xf.txt": sparse_text(xtr),
            f"{name}/trn_X_Y.txt": sparse_text(ytr),
            f"{name}/tst_X_Xf.txt": sparse_text(xte),
            f"{name}/tst_X_Y.txt": sparse_text(yte),
            f"{name}/filter_labels_train.txt": "1 1\n",
            f"{name}/filter_labels_test.txt": "0 2\n3 4\n0 2\n",  # a repeated pair counts once
            f"{name}/Xf.txt": "\n".join(f"tok{i}" for i in range(6)) + "\n",  # the vocabulary: not read
        }
    )
    get(name, archive, tmp_path)
    ds = load_dataset(name.lower(), l2_normalize=False)  # any case
    assert (ds.num_features, ds.num_classes, len(ds.train), len(ds.test)) == (6, 9, 7, 5)
    assert_loaded(ds.train, xtr, ytr)
    assert_loaded(ds.test, xte, yte)
    assert ds.test_filter is not None
    fp, fi = ds.test_filter
    assert fp.tolist() == [0, 1, 1, 1, 2, 2] and fi.tolist() == [2, 4]
    # applied before scoring: a prediction list that starts with the filtered pair loses it
    topk = torch.tensor([[2, 5, 1]] + [[0, 1, 2]] * 4)
    assert filter_predictions(topk, fp, fi, 2).tolist() == [[5, 1]] + [[0, 1]] * 4


def test_bow_features_zip(cache, tmp_path):
    """Amazon-670K's "BoW features" zip: Amazon670K.bow/train.txt and test.txt in the XC format."""
    rng = np.random.default_rng(1)
    (xtr, ytr), (xte, yte) = random_split(rng, 6, 5, 8), random_split(rng, 4, 5, 8)
    get(
        "Amazon-670K",
        zip_bytes({"Amazon670K.bow/train.txt": xc_text(xtr, ytr), "Amazon670K.bow/test.txt": xc_text(xte, yte)}),
        tmp_path,
    )
    ds = load_dataset("Amazon-670K", l2_normalize=False)
    assert_loaded(ds.train, xtr, ytr)
    assert_loaded(ds.test, xte, yte)
    assert ds.test_filter is None


@pytest.mark.parametrize("name, folder, stem", [("EURLex-4K", "Eurlex", "eurlex"), ("Wiki10-31K", "Wiki10", "wiki10")])
def test_stem_train_test_zip(name, folder, stem, cache, tmp_path):
    rng = np.random.default_rng(2)
    (xtr, ytr), (xte, yte) = random_split(rng, 5, 4, 6), random_split(rng, 3, 4, 6)
    get(
        name,
        zip_bytes({f"{folder}/{stem}_train.txt": xc_text(xtr, ytr), f"{folder}/{stem}_test.txt": xc_text(xte, yte)}),
        tmp_path,
    )
    ds = load_dataset(name, l2_normalize=False)
    assert_loaded(ds.train, xtr, ytr)
    assert_loaded(ds.test, xte, yte)


def test_folder_layouts_load_as_paths(tmp_path):
    """A folder in the split layout (or its one subfolder) loads by path like any other."""
    rng = np.random.default_rng(3)
    (xtr, ytr), (xte, yte) = random_split(rng, 4, 3, 5), random_split(rng, 2, 3, 5)
    sub = tmp_path / "LF-Mine" / "inner"
    sub.mkdir(parents=True)
    for fname, m in (("trn_X_Xf.txt", xtr), ("trn_X_Y.txt", ytr), ("tst_X_Xf.txt", xte), ("tst_X_Y.txt", yte)):
        (sub / fname).write_text(sparse_text(m))
    assert find_layout(tmp_path / "LF-Mine").kind == "split"
    ds = load_dataset(tmp_path / "LF-Mine", l2_normalize=False)
    assert_loaded(ds.test, xte, yte)
    (sub / "tst_X_Y.txt").write_text(sparse_text(sp.csr_matrix((2, 7))))  # 7 labels in test, 5 in train
    with pytest.raises(ValueError, match="must agree"):
        load_dataset(tmp_path / "LF-Mine")


def test_registry_lists_the_lf_datasets_with_sizes(capsys):
    by_name = {d.name: d for d in remote_datasets()}
    lf = by_name["LF-WikiSeeAlsoTitles-320K"]
    assert (lf.num_labels, lf.num_train, lf.num_test, lf.format) == (312330, 693082, 177515, "xc-split")
    assert by_name["LF-AmazonTitles-131K"].num_labels == 131073 and by_name["Amazon-670K"].num_labels == 670091
    assert main(["data", "get"]) == 0  # without a name: the list, with sizes
    out = capsys.readouterr().out
    for want in ("LF-AmazonTitles-131K", "LF-WikiSeeAlsoTitles-320K", "EURLex-4K", "Wiki10-31K", "312,330", "670,091"):
        assert want in out


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "empty file"),
        ("2 3 4\n", "header must be 'N C'"),
        ("1 99999999999\n", "exceeds the bound"),
        ("2 3\n0:1\n", "N=2 rows but the file has 1"),
        ("1 3\n0:1\n1:1\n", "has more"),
        ("1 3\n3:1\n", "column 3 out of range"),
        ("1 3\n0:nan\n", "not a finite float32"),
        ("1 3\n0:1e999\n", "not a finite float32"),
        ("1 3\n0=1\n", "bad entry"),
        ("1 3\n٣:1\n", "bad entry"),
    ],
)
def test_sparse_text_refuses_bad_claims(text, match, tmp_path):
    path = tmp_path / "m.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match):
        read_sparse_text(path)


@pytest.mark.parametrize(
    "text, match",
    [("0 9\n", "out of range"), ("5 0\n", "out of range"), ("0\n", "expected 'row label'"), ("a b\n", "expected")],
)
def test_filter_file_refuses_bad_pairs(text, match, tmp_path):
    path = tmp_path / "filter_labels_test.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_filter(path, num_rows=3, num_labels=4)
