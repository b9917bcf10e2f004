"""A run's names and dataset are resolved once, at the top: ``fedkernels run`` (or the Python API's
:func:`~fedkernels.experiments.resolve.resolve_run`) turns the algorithm names into their registered
spelling and locates the dataset; no layer below does either again.

The test runs ``fedkernels run`` in this process on a tiny dataset found by its bare name in
``--data-dir``, with the locator (``resolve_dataset``) and the name matcher (``canonical_name``) wrapped
wherever a fedkernels module holds them: the dataset is located exactly once, and both are called
only by the resolution layer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from fedkernels_cli import main

# where names and paths may be resolved: the CLI's config, the resolution module, and the config's
# construction (ExperimentConfig.__post_init__ spells the algorithm names as registered)
RESOLVERS = ("fedkernels_cli.config", "fedkernels.experiments.resolve", "ExperimentConfig.__post_init__")


def allowed(caller: str) -> bool:
    module, _, function = caller.partition(":")
    return module in RESOLVERS or function.split(".<locals>")[0] in RESOLVERS


def write_tiny(folder: Path, seed: int = 0) -> None:
    """``train.txt`` / ``test.txt`` in XC format (header ``N F L``): 8 features, 6 labels."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for name, n in (("train", 60), ("test", 20)):
        rows = [f"{n} 8 6"]
        for _ in range(n):
            labels = sorted({int(v) for v in rng.integers(0, 6, size=2)})
            feats = " ".join(f"{j}:{rng.random():.3f}" for j in sorted({int(v) for v in rng.integers(0, 8, 3)}))
            rows.append(",".join(map(str, labels)) + " " + feats)
        (folder / f"{name}.txt").write_text("\n".join(rows) + "\n")


def wrap_everywhere(monkeypatch, module: str, name: str, calls: list[str]) -> None:
    """Replace function ``module.name`` in every loaded fedkernels module that holds it by a wrapper
    that records the calling module in ``calls``."""
    import importlib

    original = getattr(importlib.import_module(module), name)

    def wrapper(*args, **kwargs):
        frame = sys._getframe(1)
        calls.append(f"{frame.f_globals.get('__name__', '?')}:{frame.f_code.co_qualname}")
        return original(*args, **kwargs)

    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("fedkernels") and getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, wrapper)


def test_a_run_resolves_its_names_and_dataset_once(tmp_path, monkeypatch):
    import fedkernels.experiments.resolve  # noqa: F401  (loaded, so its references are wrapped too)

    write_tiny(tmp_path / "data" / "tiny")
    located: list[str] = []
    named: list[str] = []
    wrap_everywhere(monkeypatch, "fedkernels.data.datasets", "resolve_dataset", located)
    wrap_everywhere(monkeypatch, "fedkernels.experiments.names", "canonical_name", named)
    argv = ["run", "--dataset", "tiny", "--data-dir", str(tmp_path / "data"), "--algorithms", "fedavg", "fedmlh"]
    argv += ["--rounds", "2", "--clients", "3", "--clients-per-round", "2", "--no-progress"]
    for option in ("fedavg.hidden=[8]", "FedMLH.hidden=[8]", "fedmlh.num_tables=2", "FedMLH.num_buckets=2"):
        argv += ["--option", option]
    argv += ["--output", str(tmp_path / "out")]
    assert main(argv) == 0
    assert (tmp_path / "out" / "results.json").is_file()
    assert named, "the wrapper saw no name resolved at all (it wraps nothing)"
    assert located == ["fedkernels.experiments.resolve:locate_dataset"], f"the dataset was located by {located}"
    below = sorted(c for c in set(named) if not allowed(c))
    assert not below, f"algorithm names were resolved again below the CLI, in {below}"
