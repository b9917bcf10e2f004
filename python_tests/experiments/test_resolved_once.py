"""A run's names and dataset are resolved once, at the top: ``fedkernels run`` (or the Python API's
:func:`~fedkernels.experiments.resolve.resolve_run`) turns the algorithm names into their registered
spelling and locates the dataset; no layer below does either again, a resumed run included.

The tests run ``fedkernels run`` in this process with the resolution itself (``resolve_run``), the
dataset locator (``resolve_dataset``), the name matcher (``canonical_name``) and the registry's lookup
(``strategies``, which every name-to-class lookup reads) wrapped wherever a fedkernels module holds
them: each ``fedkernels run`` resolves once, from the CLI's ``configure``; the dataset is located
once; and a name or the registry is looked up only while the run is being resolved (``configure`` or
``resolve_run`` on the stack), never by the layers that prepare, train, checkpoint, resume or report.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType

import numpy as np

from fedkernels_cli import main

# where names and paths may be resolved: the CLI's config and the resolution (and what they call)
RESOLVERS = {("fedkernels_cli.config", "configure"), ("fedkernels.experiments.resolve", "resolve_run")}
# every way a name or a dataset is looked up: (module, function)
LOOKUPS = [
    ("fedkernels.experiments.names", "canonical_name"),
    ("fedkernels.fl.registry", "strategies"),
    ("fedkernels.data.datasets", "resolve_dataset"),
]


def caller(frame: FrameType) -> str:
    return f"{frame.f_globals.get('__name__', '?')}:{frame.f_code.co_qualname}"


def resolving(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside the resolution (a :data:`RESOLVERS` function is on its stack)."""
    while frame is not None:
        if (frame.f_globals.get("__name__"), frame.f_code.co_name) in RESOLVERS:
            return True
        frame = frame.f_back
    return False


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


def wrap_everywhere(monkeypatch, module: str, name: str, calls: list[tuple[str, bool]]) -> None:
    """Replace function ``module.name`` in every loaded fedkernels module that holds it by a wrapper
    that records ``(calling module:function, whether the call is part of the resolution)`` in ``calls``."""
    import importlib

    original = getattr(importlib.import_module(module), name)

    def wrapper(*args, **kwargs):
        frame = sys._getframe(1)
        calls.append((caller(frame), resolving(frame)))
        return original(*args, **kwargs)

    for mod_name, mod in list(sys.modules.items()):
        if mod_name.startswith("fedkernels") and getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, wrapper)


def watch(monkeypatch) -> dict[str, list[tuple[str, bool]]]:
    """Wrap the resolution and every lookup; the calls each saw, by function name."""
    # loaded first, so their references are wrapped (and restored) too: a module first imported under
    # the wrappers would keep one
    import fedkernels.experiments.runner  # noqa: F401  (imported for its side effect: loaded)
    import fedkernels_cli.config
    import fedkernels_cli.run  # noqa: F401  (the same)

    calls: dict[str, list[tuple[str, bool]]] = {}
    for module, name in [*LOOKUPS, ("fedkernels.experiments.resolve", "resolve_run")]:
        wrap_everywhere(monkeypatch, module, name, calls.setdefault(name, []))
    return calls


def lookups_below(calls: dict[str, list[tuple[str, bool]]]) -> list[str]:
    return sorted({f"{name} from {where}" for _, name in LOOKUPS for where, inside in calls[name] if not inside})


def test_a_run_resolves_its_names_and_dataset_once(tmp_path, monkeypatch):
    write_tiny(tmp_path / "data" / "tiny")
    calls = watch(monkeypatch)
    argv = ["run", "--dataset", "tiny", "--data-dir", str(tmp_path / "data"), "--algorithms", "fedavg", "fedmlh"]
    argv += ["--rounds", "2", "--clients", "3", "--clients-per-round", "2", "--no-progress"]
    for option in ("fedavg.hidden=[8]", "FedMLH.hidden=[8]", "fedmlh.num_tables=2", "FedMLH.num_buckets=2"):
        argv += ["--option", option]
    argv += ["--output", str(tmp_path / "out")]
    assert main(argv) == 0
    assert (tmp_path / "out" / "results.json").is_file()
    assert calls["canonical_name"] and calls["strategies"], "the wrappers saw no lookup at all (they wrap nothing)"
    assert calls["resolve_run"] == [("fedkernels_cli.config:configure", True)], calls["resolve_run"]
    located = [where for where, _ in calls["resolve_dataset"]]
    assert located == ["fedkernels.experiments.resolve:locate_dataset"], f"the dataset was located by {located}"
    assert not lookups_below(calls), f"looked up again below the resolution: {lookups_below(calls)}"


RESUMABLE = """
algorithms = ["fedavg", "fedalc"]
dataset = "synthetic"
synthetic = {num_samples = 200, num_features = 8, num_classes = 40}
partition = "one_label"
clients_per_round = 2
local_epochs = 1
batch_size = 32
[algorithm_options.FEDAVG]
hidden = [4]
"""


def test_a_resumed_run_over_seeds_looks_nothing_up_again(tmp_path, monkeypatch, capsys):
    """Checkpoints, FedALC's client secret file (its options rebuilt for the checkpoint folder), the
    per-seed runs and the resume all take the resolved run."""
    (tmp_path / "c.toml").write_text(RESUMABLE)
    calls = watch(monkeypatch)
    base = ["run", "--config", str(tmp_path / "c.toml"), "--seeds", "2", "--no-progress"]
    base += ["--checkpoint", str(tmp_path / "k")]  # given, so kept after the run
    assert main([*base, "--rounds", "1", "--output", str(tmp_path / "a")]) == 0
    assert (tmp_path / "k" / "seed1" / "FedALC.secret").is_file()
    assert main([*base, "--rounds", "2", "--output", str(tmp_path / "b"), "--resume"]) == 0
    out = capsys.readouterr().out
    for name in ("FedAvg", "FedALC"):
        assert out.count(f"{name}: resumed from its checkpoint after 1 rounds") == 2, out
    assert calls["resolve_run"] == [("fedkernels_cli.config:configure", True)] * 2, calls["resolve_run"]
    assert not calls["resolve_dataset"]
    assert not lookups_below(calls), f"looked up again below the resolution: {lookups_below(calls)}"


def test_a_lookup_outside_the_resolution_is_caught(monkeypatch):
    calls = watch(monkeypatch)
    import fedkernels.experiments.names as names

    assert names.canonical_name("fedavg") == "FedAvg"  # as a layer below would, outside configure / resolve_run
    here = f"{__name__}:test_a_lookup_outside_the_resolution_is_caught"
    inner = "strategies from fedkernels.experiments.names:canonical_name"
    assert lookups_below(calls) == [f"canonical_name from {here}", inner]
