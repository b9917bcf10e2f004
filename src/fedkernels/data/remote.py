"""The registry of public datasets ``fedkernels data`` knows: where they are published and what they hold.

Each entry records the download URL(s) and the format as published, with the sizes of the Extreme
Classification Repository's table (https://manikvarma.github.io/downloads/XC/XMLRepository.html).
No checksum is recorded where none was known when the entry was written (this project's machines
cannot reach those hosts): ``sha256=None``, and ``fedkernels data get`` prints the SHA-256 it computed
so that it can be recorded. An entry without a direct URL (``url=None``) says where to download by hand.

The XC repository links its files on Google Drive; the ids below are the repository's links as
napkinXC's ``datasets.py`` records them (mwydmuch/napkinXC), not re-checked here. Each archive is a
zip holding ``<folder>/<name>_train.txt`` and ``_test.txt`` in the XC text format (header ``N F L``,
then ``l1,l2 f:v ...``, tf-idf features), which ``fedkernels.data.read_xc`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

XC_PAGE = "https://manikvarma.github.io/downloads/XC/XMLRepository.html"
_DRIVE = "https://drive.google.com/uc?export=download&id="


@dataclass(frozen=True)
class RemoteFile:
    """One published file.

    Attributes:
        url: where it is published (``None``: no direct link is known; see the dataset's ``page``).
        name: the file name in the cache folder.
        sha256: its SHA-256 (hex) when known, else ``None`` (never guessed).
        extract: ``"zip"`` to unpack it in the cache folder (the archive is then deleted), or ``None``.
    """

    url: str | None
    name: str
    sha256: str | None = None
    extract: str | None = None


@dataclass(frozen=True)
class RemoteDataset:
    """A dataset ``fedkernels data get`` can fetch.

    Attributes:
        name: the registry name (matched case-insensitively).
        files: what to download.
        train, test: paths (inside the cache folder, after unpacking) of the train and test files;
            ``get`` moves them to ``train.<ext>`` / ``test.<ext>`` so the folder loads like any other.
        format: ``"xc"`` (header ``N F L``), ``"libsvm"`` or ``"npz"`` (as :func:`read_any` reads), or
            ``"xc-split"`` (the LF-* layout: ``trn_X_Xf.txt``, ``trn_X_Y.txt``, ``tst_X_Xf.txt``,
            ``tst_X_Y.txt`` and filter files; ``train``/``test`` name the two ``*_X_Xf.txt``, see
            :mod:`fedkernels.data.xc_layouts`).
        num_features, num_labels, num_train, num_test: as the source publishes them.
        page: the human page describing the dataset.
        notes: anything a user should know (e.g. a manual download).
        train_split, test_split: for datasets published as one data file (``train == test``) with
            split files: the split files' paths. Each column of a split file is one split of 1-based
            row numbers; ``get`` uses the first column and writes ``train.txt``/``test.txt`` from it.
    """

    name: str
    files: tuple[RemoteFile, ...]
    train: str
    test: str
    format: str = "xc"
    num_features: int | None = None
    num_labels: int | None = None
    num_train: int | None = None
    num_test: int | None = None
    page: str = XC_PAGE
    notes: str = ""
    aliases: tuple[str, ...] = field(default=())
    train_split: str | None = None
    test_split: str | None = None


def _xc(
    name: str,
    drive_id: str | None,
    folder: str,
    stem: str,
    sizes: tuple[int, int, int, int],
    notes: str = "",
    aliases: tuple[str, ...] = (),
) -> RemoteDataset:
    f, l, ntr, nte = sizes
    url = _DRIVE + drive_id if drive_id else None
    return RemoteDataset(
        name,
        (RemoteFile(url, f"{name}.zip", None, "zip"),),
        f"{folder}/{stem}_train.txt",
        f"{folder}/{stem}_test.txt",
        "xc",
        f,
        l,
        ntr,
        nte,
        XC_PAGE,
        notes,
        aliases,
    )


def _lf(name: str, sizes: tuple[int, int, int, int], aliases: tuple[str, ...] = ()) -> RemoteDataset:
    """An LF-* dataset: ``<name>.bow.zip`` unpacking to ``<name>/trn_X_Xf.txt`` ... and its filter files."""
    f, l, ntr, nte = sizes
    return RemoteDataset(
        name,
        (RemoteFile(None, f"{name}.bow.zip", None, "zip"),),
        f"{name}/trn_X_Xf.txt",
        f"{name}/tst_X_Xf.txt",
        "xc-split",
        f,
        l,
        ntr,
        nte,
        XC_PAGE,
        _MANUAL_LF.format(name=name),
        aliases,
    )


_MANUAL_LF = (
    "no direct download link recorded: download the 'BoW features' zip from the XC repository page, then "
    "`fedkernels data get {name} --url file:///path/to/{name}.bow.zip`; the split files (trn_X_Xf.txt, "
    "trn_X_Y.txt, tst_X_Xf.txt, tst_X_Y.txt) and filter_labels_test.txt are found wherever the zip puts them"
)

_MANUAL = (
    "no direct download link recorded: download the zip from the XC repository page, then "
    "`fedkernels data get {name} --url file:///path/to/{name}.zip` (the zip's file names are those of "
    "the repository's README, not checked here); or pass a train/test copy to --dataset"
)


def _small(name: str, sizes: tuple[int, int, int, int]) -> RemoteDataset:
    """A small XC dataset: one ``<Name>_data.txt`` plus ``<name>_trSplit.txt``/``_tstSplit.txt``."""
    f, l, ntr, nte = sizes
    data, low = f"{name}/{name}_data.txt", name.lower()
    return RemoteDataset(
        name,
        (RemoteFile(None, f"{name}.zip", None, "zip"),),
        data,
        data,
        "xc",
        f,
        l,
        ntr,
        nte,
        XC_PAGE,
        _MANUAL.format(name=name),
        (),
        f"{name}/{low}_trSplit.txt",
        f"{name}/{low}_tstSplit.txt",
    )


# (F, L, N train, N test) as the XC repository's table lists them (Mediamill, Bibtex and Delicious checked
# against a stored copy of the page; the others as recorded when written, not re-checked offline).
_BUILTIN: tuple[RemoteDataset, ...] = (
    _small("Mediamill", (120, 101, 30993, 12914)),
    _small("Bibtex", (1836, 159, 4880, 2515)),
    _small("Delicious", (500, 983, 12920, 3185)),
    _xc(
        "EURLex-4K", "0B3lPMIHmG6vGU0VTR1pCejFpWjg", "Eurlex", "eurlex", (5000, 3993, 15539, 3809), aliases=("eurlex",)
    ),
    _xc(
        "Wiki10-31K",
        "0B3lPMIHmG6vGaDdOeGliWF9EOTA",
        "Wiki10",
        "wiki10",
        (101938, 30938, 14146, 6616),
        aliases=("wiki10",),
    ),
    _xc("AmazonCat-13K", "0B3lPMIHmG6vGa2tMbVJGdDNSMGc", "AmazonCat", "amazonCat", (203882, 13330, 1186239, 306782)),
    _xc(
        "Delicious-200K",
        "0B3lPMIHmG6vGR3lBWWYyVlhDLWM",
        "DeliciousLarge",
        "deliciousLarge",
        (782585, 205443, 196606, 100095),
    ),
    _xc(
        "WikiLSHTC-325K",
        "0B3lPMIHmG6vGSHE1SWx4TVRva3c",
        "WikiLSHTC",
        "wikiLSHTC",
        (1617899, 325056, 1778351, 587084),
        aliases=("wikilshtc",),
    ),
    _xc("Amazon-670K", "0B3lPMIHmG6vGdUJwRzltS1dvUVk", "Amazon", "amazon", (135909, 670091, 490449, 153025)),
    _xc("Amazon-3M", "0B3lPMIHmG6vGUEd4eTRxaWl3YkE", "Amazon-3M", "amazon-3M", (337067, 2812281, 1717899, 742507)),
    # The label-feature datasets of the papers (BoW features; F, L, N train, N test as the repository's
    # table lists them, not re-checked offline). Their test ground truth leaves out reciprocal pairs,
    # which filter_labels_test.txt lists for removal from the predictions before scoring.
    _lf("LF-AmazonTitles-131K", (40000, 131073, 294805, 134835), aliases=("lf-amazontitles",)),
    _lf("LF-WikiSeeAlsoTitles-320K", (40000, 312330, 693082, 177515), aliases=("lf-wikiseealsotitles",)),
)

_REGISTRY: dict[str, RemoteDataset] = {}


def register(ds: RemoteDataset, replace: bool = False) -> RemoteDataset:
    """Add a dataset (e.g. a mirror, or your own data on a web server) under ``ds.name`` and its aliases.

    Raises:
        ValueError: the name is taken (unless ``replace``), or ``format`` is unknown.
    """
    if ds.format not in ("xc", "xc-split", "libsvm", "npz"):
        raise ValueError(f"format must be 'xc', 'xc-split', 'libsvm' or 'npz', got {ds.format!r}")
    keys = [k.lower() for k in (ds.name, *ds.aliases)]
    taken = [k for k in keys if k in _REGISTRY and _REGISTRY[k].name != ds.name]
    if (taken or ds.name.lower() in _REGISTRY) and not replace:
        raise ValueError(f"dataset name(s) {taken or [ds.name]} already registered (pass replace=True)")
    for k in keys:
        _REGISTRY[k] = ds
    return ds


def unregister(name: str) -> None:
    """Remove a dataset and its aliases from the registry (no error if it is not there)."""
    ds = _REGISTRY.get(name.lower())
    if ds is not None:
        for k in [k for k, v in _REGISTRY.items() if v is ds]:
            del _REGISTRY[k]


def remote_datasets() -> list[RemoteDataset]:
    """Every registered dataset, once each, in registration order."""
    seen: dict[int, RemoteDataset] = {}
    for ds in _REGISTRY.values():
        seen.setdefault(id(ds), ds)
    return list(seen.values())


def find_remote(name: str) -> RemoteDataset | None:
    """The registered dataset called ``name`` (or one of its aliases), any case; ``None`` if unknown."""
    return _REGISTRY.get(str(name).lower())


def get_remote(name: str) -> RemoteDataset:
    """Like :func:`find_remote` but raises ``ValueError`` listing the known names."""
    ds = find_remote(name)
    if ds is None:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(d.name for d in remote_datasets())}")
    return ds


for _ds in _BUILTIN:
    register(_ds)
