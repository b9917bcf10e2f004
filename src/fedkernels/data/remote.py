"""The registry of public datasets ``fedkernels data`` knows: where they are published and what they hold.

Each entry records the download URL(s) and the format as published, with the sizes of the Extreme
Classification Repository's table (https://manikvarma.github.io/downloads/XC/XMLRepository.html).

Checksums: Bibtex and Delicious come from Mulan's repository at a pinned commit, and their SHA-256s
were computed from that commit's git objects (the bytes those URLs serve). For the other entries
no checksum was known when they were written (this project's machines cannot reach those hosts):
``sha256=None``, and ``fedkernels data get`` trusts the first download, records its SHA-256 beside
the data (``.fedkernels-trust.json``) with a warning, and refuses a later download that differs. An
entry without a direct URL (``url=None``) says where to download by hand.

The XC repository links its files on Google Drive; the ids below are the repository's links as
napkinXC's ``datasets.py`` records them (mwydmuch/napkinXC), not re-checked here. Each archive is a
zip holding ``<folder>/<name>_train.txt`` and ``_test.txt`` in the XC text format (header ``N F L``,
then ``l1,l2 f:v ...``, tf-idf features), which ``fedkernels.data.read_xc`` reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

XC_PAGE = "https://manikvarma.github.io/downloads/XC/XMLRepository.html"
MULAN_PAGE = "https://github.com/tsoumakas/mulan/tree/master/data/multi-label"
# Mulan's data at one commit, so the bytes behind each URL never change (their SHA-256s below were
# computed from this commit's git objects).
_MULAN_RAW = (
    "https://raw.githubusercontent.com/tsoumakas/mulan/43f6389095ad71984264db4387a8074b22bc7d4a/data/multi-label"
)
BYTES_PER_SAMPLE = 16 << 10
DEFAULT_MAX_BYTES = 4 << 30
FORMATS = ("xc", "xc-split", "libsvm", "npz", "arff")
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
            ``"arff"`` (Mulan's ARFF, labels in the last ``num_labels`` attributes: ``get`` converts it
            to XC text).
            ``"xc-split"`` (the LF-* layout: ``trn_X_Xf.txt``, ``trn_X_Y.txt``, ``tst_X_Xf.txt``,
            ``tst_X_Y.txt`` and filter files; ``train``/``test`` name the two ``*_X_Xf.txt``, see
            :mod:`fedkernels.data.xc_layouts`).
        num_features, num_labels, num_train, num_test: as the source publishes them.
        page: the human page describing the dataset.
        notes: anything a user should know (e.g. a manual download).
        train_split, test_split: for datasets published as one data file (``train == test``) with
            split files: the split files' paths. Each column of a split file is one split of 1-based
            row numbers; ``get`` uses the first column and writes ``train.txt``/``test.txt`` from it.
        max_bytes: the most bytes a download (and its unpacked files) may take (default: see
            :meth:`size_bound`).
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
    max_bytes: int | None = None

    def size_bound(self) -> int:
        """The most bytes a download of this dataset, and its unpacked files, may take: ``max_bytes``
        if recorded, else :data:`BYTES_PER_SAMPLE` per published sample plus 1 MiB (an XC text line
        is a few hundred bytes to a few KiB), else :data:`DEFAULT_MAX_BYTES`."""
        if self.max_bytes is not None:
            return self.max_bytes
        if self.num_train is not None and self.num_test is not None:
            return BYTES_PER_SAMPLE * (self.num_train + self.num_test) + (1 << 20)
        return DEFAULT_MAX_BYTES


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


def _mulan(name: str, stem: str, sizes: tuple[int, int, int, int], sha: tuple[str, str]) -> RemoteDataset:
    """A Mulan dataset with its official train/test split, as ARFF files at a pinned commit."""
    f, l, ntr, nte = sizes
    return RemoteDataset(
        name,
        (
            RemoteFile(f"{_MULAN_RAW}/{stem}/{stem}-train.arff", f"{stem}-train.arff", sha[0]),
            RemoteFile(f"{_MULAN_RAW}/{stem}/{stem}-test.arff", f"{stem}-test.arff", sha[1]),
        ),
        f"{stem}-train.arff",
        f"{stem}-test.arff",
        "arff",
        f,
        l,
        ntr,
        nte,
        MULAN_PAGE,
        "Mulan's official train/test split (the one the shipped presets use), converted to XC text on download",
        (stem,),
    )


# (F, L, N train, N test) as the XC repository's table lists them (Mediamill, Bibtex and Delicious checked
# against a stored copy of the page; the others as recorded when written, not re-checked offline).
_BUILTIN: tuple[RemoteDataset, ...] = (
    _small("Mediamill", (120, 101, 30993, 12914)),
    _mulan(
        "Bibtex",
        "bibtex",
        (1836, 159, 4880, 2515),
        (
            "8dcc9de6e0b2cebaec8c1f4fac78431adeeb73cfd3ab879b530a66d366e59174",
            "9b03329cde64d3f994bdf7fbbac3f3b10fe185c311cb9ae725475f59c7f3f922",
        ),
    ),
    _mulan(
        "Delicious",
        "delicious",
        (500, 983, 12920, 3185),
        (
            "030186cdb542ebdd32052fcdbb1ebe30115b3a22518c1b4b198c45eb827aebe1",
            "2dfb01723a819914b0ca83361177ed413ce3f2169851d9f228d4692915d63944",
        ),
    ),
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
    if ds.format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {ds.format!r}")
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
