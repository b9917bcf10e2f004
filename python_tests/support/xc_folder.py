"""A small dataset folder in the XC text format (``train.txt`` and ``test.txt``), drawn by
:func:`fedkernels.data.synthetic_xc`: for tests of what a file dataset goes through (fetch, cache,
``--dataset``, sparse loading), where the real data is not the point."""

from __future__ import annotations

from pathlib import Path

from fedkernels.data import XCData, synthetic_xc, write_xc


def write_xc_folder(
    folder: Path,
    num_train: int = 300,
    num_test: int = 100,
    num_features: int = 256,
    num_labels: int = 30,
    seed: int = 0,
) -> Path:
    """Write ``folder/train.txt`` ([num_train, num_features] features, [num_train, num_labels] labels)
    and ``folder/test.txt`` (``num_test`` rows), one draw split in two; returns ``folder``."""
    d = synthetic_xc(
        num_samples=num_train + num_test,
        num_features=num_features,
        num_classes=num_labels,
        num_topics=8,
        features_per_sample=12,
        labels_per_sample=2.0,
        seed=seed,
    )
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", slice(0, num_train)), ("test", slice(num_train, num_train + num_test))):
        write_xc(XCData(d.features[rows], d.labels[rows]), folder / f"{name}.txt")
    return folder
