"""Named presets: one TOML file per paper table row, run by ``fedkernels run --preset NAME``.

A preset file ``presets/<name>.toml`` is a ``--config`` TOML file (the keys of
:class:`~fedkernels.experiments.experiment.ExperimentConfig`) plus a ``[paper]`` table saying what it
reproduces (schema in docs/api/fl.md, "Presets")::

    algorithms = ["FedAvg", "FedMLH"]
    dataset = "bibtex"                  # a shipped dataset name, or a path
    rounds = 30
    [algorithm_options.FedMLH]
    num_buckets = 20
    [paper]
    source = "FedMLH (Dai et al.), Table 2"
    dataset_note = "official Mulan split; the paper ran larger data"
    [paper.p_at_1]                      # algorithm -> the paper's P@1 in percent (may be empty)
    FedAvg = 41.0
    [paper.sweep]                       # optional: the sweep the paper reports
    option = "FedMLH.num_buckets"
    values = [10, 20, 40]
    p_at_1 = [40.0, 45.0, 46.0]         # optional, one per value
    [measured]                          # optional: tools/dev/preset_times.py writes it
    seconds_per_seed = 186              # one seed's time in the committed runs (median)
    seeds = 3
    runs = "bench/results/fl/paper/fedmlh-bibtex/seed*/results.json"
    machine = "CPU, 1 thread(s), avx2 kernels, torch 2.13.0+cpu"

The files ship inside the package (``importlib.resources``), so an installed wheel has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .._suggest import did_you_mean
from .configuration import config_keys, parse_toml

PAPER_KEYS = {"source", "dataset_note", "p_at_1", "sweep"}
SWEEP_KEYS = {"option", "values", "p_at_1"}
MEASURED_KEYS = {"seconds_per_seed", "seeds", "runs", "machine"}


@dataclass(frozen=True)
class Sweep:
    """A sweep the paper reports: ``option`` (``ALG.key``) over ``values``, with the paper's P@1 (%) per value."""

    option: str
    values: list[Any]
    p_at_1: list[float] | None = None


@dataclass(frozen=True)
class Preset:
    """A named experiment: its run settings and what the paper reports for it.

    Attributes:
        name: the file's stem (``fedmlh-bibtex``).
        config: ExperimentConfig fields (as in a ``--config`` file; ``dataset`` not yet resolved).
        source: the paper and its table.
        dataset_note: how our data and protocol relate to the paper's.
        p_at_1: algorithm -> the paper's P@1 in percent (empty if the paper has no number here).
        sweep: the sweep the paper reports, if any.
        measured: the time one seed took in the committed runs (``seconds_per_seed``, over ``seeds``
            seeds, from ``runs`` on ``machine``); empty if none are committed.
    """

    name: str
    config: dict[str, Any]
    source: str
    dataset_note: str
    p_at_1: dict[str, float] = field(default_factory=dict)
    sweep: Sweep | None = None
    measured: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for ``--list-presets``."""
        algos = ", ".join(self.config.get("algorithms", []))
        return f"{algos} on {self.config.get('dataset', 'synthetic')} ({self.source})"


def _preset_dir():
    return resources.files("fedkernels.experiments") / "presets"


def preset_names() -> list[str]:
    """Names of the shipped presets, sorted."""
    return sorted(p.name[: -len(".toml")] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))


def list_presets() -> list[Preset]:
    """Every shipped preset, sorted by name."""
    return [load_preset(n) for n in preset_names()]


def load_preset(name: str) -> Preset:
    """The shipped preset ``name``, or a preset file at the path ``name``.

    Raises:
        ValueError: no such preset (the message lists the shipped ones), or the file breaks the schema
            (the message names the file and the key).
    """
    path = Path(name)
    if name.endswith(".toml") and path.is_file():
        return parse_preset(path.stem, path.read_text(), str(path))
    res = _preset_dir() / f"{name}.toml"
    if not res.is_file():
        known = preset_names()
        raise ValueError(f"unknown preset {name!r}{did_you_mean(name, known)}; shipped presets: {', '.join(known)}")
    return parse_preset(name, res.read_text(), f"preset {name}")


def parse_preset(name: str, text: str, where: str) -> Preset:
    """A preset from its TOML text; ``where`` names it in errors."""
    data = parse_toml(text)
    paper = data.pop("paper", None)
    measured = _measured(data.pop("measured", {}), where)
    if not isinstance(paper, dict):
        raise ValueError(f"{where}: a preset needs a [paper] table (source, dataset_note, [paper.p_at_1])")
    unknown = sorted(set(data) - config_keys())
    if unknown:
        raise ValueError(f"{where}: unknown config keys {unknown}")
    bad = sorted(set(paper) - PAPER_KEYS)
    if bad:
        raise ValueError(f"{where}: unknown [paper] keys {bad}; known: {sorted(PAPER_KEYS)}")
    for key in ("source", "dataset_note"):
        if not isinstance(paper.get(key), str) or not paper[key].strip():
            raise ValueError(f"{where}: paper.{key} must be a non-empty string")
    p_at_1 = paper.get("p_at_1", {})
    if not isinstance(p_at_1, dict):
        raise ValueError(f"{where}: paper.p_at_1 must be a table of algorithm = percent")
    for alg, v in p_at_1.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100:
            raise ValueError(f"{where}: paper.p_at_1.{alg} must be a percentage in [0, 100], got {v!r}")
    return Preset(
        name,
        data,
        paper["source"].strip(),
        paper["dataset_note"].strip(),
        {k: float(v) for k, v in p_at_1.items()},
        _sweep(paper.get("sweep"), where),
        measured,
    )


def _measured(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or (raw and set(raw) != MEASURED_KEYS):
        raise ValueError(f"{where}: [measured] must be a table of exactly {sorted(MEASURED_KEYS)}")
    if raw:
        seconds, seeds = raw["seconds_per_seed"], raw["seeds"]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
            raise ValueError(f"{where}: measured.seconds_per_seed must be a positive number, got {seconds!r}")
        if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
            raise ValueError(f"{where}: measured.seeds must be a positive integer, got {seeds!r}")
        if not all(isinstance(raw[k], str) and raw[k].strip() for k in ("runs", "machine")):
            raise ValueError(f"{where}: measured.runs and measured.machine must be non-empty strings")
    return dict(raw)


def _sweep(raw: Any, where: str) -> Sweep | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: paper.sweep must be a table (option, values, p_at_1)")
    bad = sorted(set(raw) - SWEEP_KEYS)
    if bad:
        raise ValueError(f"{where}: unknown [paper.sweep] keys {bad}; known: {sorted(SWEEP_KEYS)}")
    option, values, p = raw.get("option"), raw.get("values"), raw.get("p_at_1")
    if not isinstance(option, str) or "." not in option:
        raise ValueError(f"{where}: paper.sweep.option must look like 'ALGORITHM.key', got {option!r}")
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: paper.sweep.values must be a non-empty list")
    if p is not None and (not isinstance(p, list) or len(p) != len(values)):
        raise ValueError(f"{where}: paper.sweep.p_at_1 must list one percentage per value ({len(values)})")
    return Sweep(option, values, None if p is None else [float(v) for v in p])


def data_roots(data_dir: str | Path | None = None) -> list[Path]:
    """Folders searched for a bare dataset name (:func:`fedkernels.data.locations.data_roots`)."""
    from ..data.locations import data_roots as roots

    return roots(data_dir)


def resolve_preset_dataset(dataset: str, data_dir: str | Path | None = None) -> str:
    """A preset's (or ``--dataset``'s) ``dataset``: ``synthetic`` as it is, else the path
    :func:`fedkernels.data.resolve_dataset` finds for it (a path, or a bare name looked up in
    ``data_dir`` and the data folder, any case).

    Raises:
        FileNotFoundError: not found (the message lists where it looked).
    """
    from .resolve import locate_dataset

    path = locate_dataset(dataset, data_dir)
    return "synthetic" if path is None else str(path)
