"""The result files a resolved run writes, and the check, before any data is read, that it can write them."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._info import build_info
from .limits import check_output_files, check_writable_folder
from .report import plot_accuracy, write_csv, write_json

if TYPE_CHECKING:
    from .preparation import PreparedData
    from .resolve import ResolvedRun

RESULT_FILES = ("results.json", "results.md", "rounds.csv", "accuracy.png", "seeds.md", "seeds.json")


def check_outputs(run: ResolvedRun) -> None:
    """The output folder takes files and none of the result files is in the way, checked before any
    data is read: a run never fails after training with its results lost.

    Raises:
        ValueError: naming the output path and what is wrong.
    """
    folder = check_writable_folder(run.config.output, "output")
    check_output_files(folder, RESULT_FILES)


def write_run_outputs(
    out: Path,
    run: ResolvedRun,
    data: PreparedData,
    results: list[dict[str, Any]],
    target: float | None,
    table: str,
) -> bool:
    """Write one run's ``results.json`` (config with secrets redacted, dataset, split, build, results),
    ``results.md`` (``table``), ``rounds.csv`` and ``accuracy.png`` into ``out``. Returns whether the
    plot was written (it needs matplotlib)."""
    from .experiment import redact_secrets

    cfg, ds = run.config, data.dataset
    out.mkdir(parents=True, exist_ok=True)
    write_json(
        out / "results.json",
        {
            "config": {
                **asdict(cfg),
                "algorithm_options": {a: redact_secrets(o) for a, o in cfg.algorithm_options.items()},
            },
            "dataset": {
                "name": ds.name,
                **ds.notes,
                "train": len(ds.train),
                "test": len(data.test),
                "features": ds.num_features,
                "classes": ds.num_classes,
                "clients": len(data.clients),
            },
            "split": data.split,
            "build": build_info(),
            "target_P@1": target,
            "results": results,
        },
    )
    (out / "results.md").write_text(table + "\n")
    write_csv(out / "rounds.csv", results)
    return plot_accuracy(out / "accuracy.png", results, "P@1", f"{ds.name}, partition {cfg.partition}") is not None


def write_seed_outputs(out: Path, preset: str | None, seeds: list[int], rows: list[dict[str, Any]], table: str) -> None:
    """Write the summary over seeds: ``seeds.md`` (``table``) and ``seeds.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "seeds.md").write_text(table + "\n")
    (out / "seeds.json").write_text(json.dumps({"preset": preset, "seeds": seeds, "rows": rows}, indent=2))
