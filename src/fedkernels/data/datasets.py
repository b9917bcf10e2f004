"""One entry point for the datasets a run uses: ``synthetic``, a registered dataset fetched by
``fedkernels data get NAME``, or a file or folder (XC text, libsvm multi-label, or scipy ``.npz``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from .._suggest import did_you_mean
from ..sparse_rows import csr_from_scipy
from .feature_hashing import hash_features, idf_weights, l2_normalize_csr, l2_normalize_rows
from .formats import read_any
from .split import train_test_split
from .synthetic import synthetic_multilabel
from .types import ClientData
from .xc_format import XCData
from .xc_layouts import FILTER_FILES, Layout, find_layout, read_filter, read_layout


@dataclass
class Dataset:
    """A train/test pair ready for the loop, and where it came from.

    Attributes:
        train, test: :class:`~fedkernels.fl.ClientData` (float32 features, dense or ``torch.sparse_csr``
            when loaded with ``sparse=True``; CSR labels).
        name: what was loaded (``"synthetic"`` or the path).
        notes: how it was made (split seed, hashing dimension, ...), for reports.
        test_filter: the LF-* datasets' ``filter_labels_test.txt`` as CSR over the test rows
            (``indptr [N_test + 1]``, ``indices``): (sample, label) pairs dropped from the predictions
            before scoring (:func:`fedkernels.metrics.filter_predictions`); ``None`` without one.
    """

    train: ClientData
    test: ClientData
    name: str
    notes: dict = field(default_factory=dict)
    test_filter: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def num_features(self) -> int:
        return int(self.train.x.shape[1])

    @property
    def num_classes(self) -> int:
        return self.train.num_classes


def to_client_data(x: torch.Tensor | sp.spmatrix, labels: sp.csr_matrix) -> ClientData:
    """Features ``[N, F]`` (a dense tensor, a ``torch.sparse_csr`` tensor, or a scipy sparse matrix,
    which stays sparse as ``torch.sparse_csr``) and a 0/1 label CSR ``[N, L]`` as a :class:`ClientData`."""
    if sp.issparse(x):
        x = csr_from_scipy(x)
    labels = sp.csr_matrix(labels)
    labels.sort_indices()
    return ClientData(
        x,
        torch.from_numpy(labels.indptr.astype(np.int64)),
        torch.from_numpy(labels.indices.astype(np.int64)),
        int(labels.shape[1]),
    )


MAX_DENSE_ELEMENTS = 2**27
"""The most N * F elements :func:`load_xc_dataset` turns dense without ``feature_dim`` (134,217,728:
512 MiB as float32, about 1.5 GiB at peak while densifying); checked before allocating."""


def dense_width(num_rows: int, cap: int = 1 << 14) -> int:
    """The hashed feature width a run picks when a dataset is too wide to keep dense: the largest power of
    two up to ``cap`` (at least 64) keeping ``num_rows x width`` within :data:`MAX_DENSE_ELEMENTS`."""
    dim = cap
    while dim > 64 and max(1, num_rows) * dim > MAX_DENSE_ELEMENTS:
        dim //= 2
    return dim


def check_dense_size(n: int, f: int, path: Path, part: str) -> None:
    """``ValueError`` naming ``path`` if a dense ``[n, f]`` feature matrix exceeds :data:`MAX_DENSE_ELEMENTS`."""
    if n * f > MAX_DENSE_ELEMENTS:
        raise ValueError(
            f"{path}: the {part} features would be {n} x {f} = {n * f} dense elements, above the "
            f"bound {MAX_DENSE_ELEMENTS} (2**27); pass feature_dim= to hash them to fewer columns"
        )


@dataclass(frozen=True)
class DataFiles:
    """Where a dataset path keeps its samples (:func:`locate_data`).

    Attributes:
        train: the training file, or the one file of all samples when ``test`` is ``None``
            (``None`` with a ``layout``).
        test: the official test file, if any.
        layout: the repository's other layouts (``trn_X_Xf.txt`` ..., ``<stem>_train.txt``), if that is it.
    """

    train: Path | None
    test: Path | None
    layout: Layout | None = None


def locate_data(path: Path) -> DataFiles:
    """The files of dataset ``path``: the file itself; else in the folder, ``train`` + ``test`` (``.txt``,
    ``.svm``, ``_X.npz``), one of the repository's layouts (:func:`find_layout`), or ``all``.

    Raises:
        FileNotFoundError: none of them (the message lists what a dataset folder may hold).
    """
    if path.is_file():
        return DataFiles(path, None)
    for ext in (".txt", ".svm", "_X.npz"):
        if (path / f"train{ext}").is_file() and (path / f"test{ext}").is_file():
            return DataFiles(path / f"train{ext}", path / f"test{ext}")
    layout = find_layout(path)
    if layout is not None:
        return DataFiles(None, None, layout)
    for ext in (".txt", ".svm", "_X.npz"):
        if (path / f"all{ext}").is_file():
            return DataFiles(path / f"all{ext}", None)
    raise FileNotFoundError(
        f"{path}: expected an XC-format, libsvm or .npz data file, or a folder with "
        "train+test or all (.txt XC or libsvm, .svm libsvm, or _X.npz/_Y.npz pairs), "
        "trn_X_Xf.txt/trn_X_Y.txt/tst_X_Xf.txt/tst_X_Y.txt, or <stem>_train.txt/<stem>_test.txt, "
        "or a dataset name from `fedkernels data list`"
    )


def _xc_parts(path: Path, test_fraction: float, seed: int) -> tuple[XCData, XCData, dict]:
    files = locate_data(path)
    if files.layout is not None:
        train_part, test_part = read_layout(files.layout)
        return train_part, test_part, {"split": f"official {files.layout.train.name}/{files.layout.test.name}"}
    assert files.train is not None
    if files.test is not None:
        return read_any(files.train), read_any(files.test), {"split": f"official {files.train.name}/{files.test.name}"}
    full = read_any(files.train)
    tr, te = train_test_split(full.num_samples, test_fraction, seed)
    note = {
        "split": f"seeded permutation (fedkernels.data.train_test_split, seed={seed}, test_fraction={test_fraction})"
    }
    return full.subset(tr), full.subset(te), note


def load_xc_dataset(
    path: str | Path,
    feature_dim: int | None = None,
    seed: int = 0,
    test_fraction: float = 0.2,
    tfidf: bool = False,
    l2_normalize: bool = True,
    sparse: bool = False,
) -> Dataset:
    """Load an XC-format dataset, its features dense or (``sparse=True``) kept sparse.

    Args:
        path: a file, or a folder with ``train.txt`` and ``test.txt`` (the official split) or ``all.txt``
            (XC or libsvm text; also ``.svm``, or ``train_X.npz``/``train_Y.npz`` pairs, see ``formats.py``)
            (split by :func:`train_test_split` with ``seed`` and ``test_fraction``).
        feature_dim: hash the features to this many signed buckets (FedMLH's feature hashing);
            ``None`` keeps the original F features.
        seed: the split's and the feature hash's seed.
        tfidf: weight features by idf fitted on the training part.
        l2_normalize: scale each sample's feature vector to unit norm.
        sparse: keep the features as ``torch.sparse_csr`` tensors from file to model (memory
            proportional to the nonzeros; no :data:`MAX_DENSE_ELEMENTS` bound). The models' first
            layers take them as they are.
    """
    path = Path(path)
    train, test, notes = _xc_parts(path, test_fraction, seed)
    idf = idf_weights(train.features) if tfidf else None

    if feature_dim is None and not sparse:
        check_dense_size(train.num_samples, train.num_features, path, "training")
        check_dense_size(test.num_samples, test.num_features, path, "test")

    def dense(feats: sp.csr_matrix) -> torch.Tensor:
        if feature_dim is not None:
            return hash_features(feats, feature_dim, seed, idf, l2_normalize, sparse=sparse)
        if sparse:
            m = sp.csr_matrix(feats, dtype=np.float64)
            if idf is not None:
                m = sp.csr_matrix(m.multiply(idf.reshape(1, -1)))
            return csr_from_scipy(l2_normalize_csr(m) if l2_normalize else m)
        x = np.asarray(feats.todense(), dtype=np.float64)
        if idf is not None:
            x = x * idf
        return torch.from_numpy((l2_normalize_rows(x) if l2_normalize else x).astype(np.float32))

    notes.update(feature_dim=feature_dim or train.num_features, tfidf=tfidf, l2_normalize=l2_normalize, sparse=sparse)
    test_filter = None
    if "official" in str(notes.get("split", "")):  # a filter file describes the official test split only
        layout = find_layout(path)
        where = layout.filters.get("test") if layout is not None else path / FILTER_FILES["test"]
        if where is not None and where.is_file():
            fp, fi = read_filter(where, test.num_samples, test.num_labels)
            test_filter = (torch.from_numpy(fp), torch.from_numpy(fi))
            notes["test_filter"] = f"{where.name}: {fi.size} (sample, label) pairs dropped from predictions"
    return Dataset(
        to_client_data(dense(train.features), train.labels),
        to_client_data(dense(test.features), test.labels),
        str(path),
        notes,
        test_filter,
    )


def load_dataset(
    spec: str | Path = "synthetic",
    seed: int = 0,
    feature_dim: int | None = None,
    test_fraction: float = 0.2,
    sparse: bool = False,
    l2_normalize: bool = True,
    **synthetic_kw,
) -> Dataset:
    """``"synthetic"`` (see :func:`synthetic_multilabel`; ``synthetic_kw`` passes its arguments,
    train and test drawn together then split), a path for :func:`load_xc_dataset`, or the name of a
    dataset fetched with ``fedkernels data get`` (see :func:`resolve_dataset`). ``sparse`` keeps a
    file's features sparse (see :func:`load_xc_dataset`); the synthetic default is always dense.
    ``l2_normalize`` (file datasets only): unit-norm feature rows, else the file's raw values."""
    if str(spec) == "synthetic":
        full = synthetic_multilabel(seed=seed, **synthetic_kw)
        tr, te = train_test_split(len(full), test_fraction, seed)
        return Dataset(
            full.rows(torch.from_numpy(tr)),
            full.rows(torch.from_numpy(te)),
            "synthetic",
            {"split": f"seeded permutation (seed={seed}, test_fraction={test_fraction})", **synthetic_kw},
        )
    return load_xc_dataset(
        resolve_dataset(spec), feature_dim, seed, test_fraction, l2_normalize=l2_normalize, sparse=sparse
    )


def _known_names(roots: list[Path], registered: list) -> list[str]:
    """Names a bare dataset name could have meant: the folders in the data roots, then the registered datasets."""
    names: list[str] = []
    for root in roots:
        try:
            names += sorted(p.name for p in root.iterdir() if not p.name.startswith("."))
        except OSError:
            continue
    return names + [n for d in registered for n in (d.name, *d.aliases)]


def resolve_dataset(spec: str | Path, data_dir: str | Path | None = None, verify: bool = True) -> Path:
    """The data of ``spec``: a path as given if it exists; else a bare name (``bibtex``, any case, or
    a registered dataset's name or alias) looked up in :func:`~fedkernels.data.locations.data_roots`
    (``data_dir``, the data folder ``$FEDKERNELS_DATA_DIR``, ``./data``, ``../shared/data``). A copy
    fetched by ``fedkernels data get`` is checked against the SHA-256 of its files recorded at fetch
    time (:func:`~fedkernels.data.fetcher.verify_folder`), so later edits to the cache are noticed
    (``verify=False`` skips that, for a look at headers before the load that checks them).

    Raises:
        FileNotFoundError: not found; the message lists every place it looked and, for a registered
            dataset, the ``fedkernels data get`` command that fetches it.
        ValueError: a fetched copy whose files changed since they were fetched.
    """
    from .fetcher import verify_folder
    from .locations import data_dir as default_data_dir
    from .locations import data_roots, dataset_names, find_dataset, is_bare_name
    from .remote import find_remote, remote_datasets

    path = Path(spec).expanduser()
    if path.exists():
        return path
    name = str(spec)
    remote = find_remote(name)
    roots = data_roots(data_dir)
    if is_bare_name(name):
        found = find_dataset(name, data_dir)
        if found is not None:
            if verify and found.fetched:
                verify_folder(found.path)
            return found.path
        looked = ", ".join(str(r / name) for r in roots)
        # the lookup ignores case, so a name equal to this one but for case is no suggestion
        looked += did_you_mean(name, _known_names(roots, remote_datasets()), exclude=dataset_names(name))
    else:
        looked = str(path)
    if remote is not None:
        get = f"fedkernels data get {remote.name}" + (f" --data-dir {data_dir}" if data_dir else "")
        hint = (
            f"; {remote.name} is a registered dataset, not downloaded yet: `{get}` downloads it into "
            f"{data_dir or default_data_dir()}"
        )
    else:
        hint = " (pass a file or folder, set --data-dir or $FEDKERNELS_DATA_DIR, or see `fedkernels data list`)"
    raise FileNotFoundError(f"dataset {name!r} not found, looked in: {looked}{hint}")
