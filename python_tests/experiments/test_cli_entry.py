"""The ``fedkernels`` script's front door: help, usage errors and the commands that only list things
answer without importing torch, and the parser's defaults are the config's."""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedkernels_cli
from fedkernels.data import fetcher, locations, remote_datasets
from fedkernels.experiments import list_presets
from fedkernels.experiments.experiment import DEFAULT_OPTIONS, ExperimentConfig
from fedkernels_cli import data as cli_data
from fedkernels_cli import defaults, main, standalone
from fedkernels_cli.main import main as script_main
from fedkernels_cli.presets import PRESET_SEEDS, duration

# run the entry as the console script does, then report which heavy modules the process imported
PROBE = """
import sys
from fedkernels_cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
else:
    code = 0
print("imported:", sorted(m for m in ("torch", "fedkernels", "numpy") if m in sys.modules), "exit:", code)
"""


def probe(argv: list[str], tmp_path: Path) -> tuple[str, subprocess.CompletedProcess]:
    """Run the entry with ``argv`` in a fresh process; its last line says what it imported and its exit."""
    env = dict(os.environ)
    src = str(Path(fedkernels_cli.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env["FEDKERNELS_DATA_DIR"] = str(tmp_path)
    got = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    return got.stdout.strip().splitlines()[-1], got


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["run", "--help"], ["data", "--help"], ["run", "--no-such-flag"], ["no-such-command"], []],
)
def test_help_and_usage_errors_do_not_import_torch(argv: list[str], tmp_path: Path) -> None:
    last, got = probe(argv, tmp_path)
    assert last.startswith("imported: []"), (last, got.stderr[-2000:])
    assert last.endswith("exit: 0" if "--help" in argv else "exit: 2"), (last, got.stderr[-2000:])


@pytest.mark.parametrize("command", [[], ["run"], ["data"], ["info"], ["bench"]])
def test_help_is_plain_text_without_checkout_paths(command: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main([*command, "--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "fedkernels" in text
    for markup in ("``", ":func:", ":class:", ":mod:", "../", "shared/data", "docs/"):
        assert markup not in text, (command, markup)


@pytest.mark.parametrize("argv", [["run", "--list-presets"], ["data", "list"], ["data", "get"], ["bench"]])
def test_listing_commands_do_not_import_torch(argv: list[str], tmp_path: Path) -> None:
    last, got = probe(argv, tmp_path)
    assert last == "imported: [] exit: 0", (last, got.stderr[-2000:])
    assert "Traceback" not in got.stderr


def test_list_presets_shows_rounds_seeds_and_the_measured_time(capsys) -> None:
    assert main(["run", "--list-presets"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    presets = list_presets()
    assert any(p.measured for p in presets) and any(not p.measured for p in presets)
    for p in presets:
        fields = lines[p.name].split()
        assert fields[1] == p.config["dataset"] and fields[2] == str(p.config["rounds"])
        assert fields[3] == str(PRESET_SEEDS)
        time = duration(p.measured["seconds_per_seed"]) if p.measured else "not measured"
        assert " ".join(fields[4:]).startswith(time), lines[p.name]


def test_duration() -> None:
    assert [duration(s) for s in (5, 89, 186, 497, 5399, 7200)] == [
        "5 s",
        "89 s",
        "3.1 min",
        "8.3 min",
        "90.0 min",
        "2.0 h",
    ]


def test_data_list_reads_the_registry_and_the_data_folder(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(tmp_path))
    first = remote_datasets()[0]
    assert fetcher.dataset_dir(first.name) == tmp_path / first.name
    (tmp_path / first.name).mkdir()
    (tmp_path / first.name / fetcher.MARKER).write_text("{}")
    assert fetcher.is_fetched(first.name)  # the marker the listing looks for is the fetcher's
    assert cli_data.MARKER == fetcher.MARKER
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    for ds in remote_datasets():
        expected = "downloaded" if ds is first else ("not downloaded" if all(f.url for f in ds.files) else "manual")
        assert rows[ds.name].split("  ")[-1].strip().startswith(expected), rows[ds.name]
    assert f"data folder: {tmp_path}" in out


def test_standalone_modules_import_only_the_standard_library() -> None:
    for rel in standalone.STANDALONE:
        tree = ast.parse((standalone.package_dir() / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                # a sibling that is standalone itself: it runs under the same stand-in package, no __init__
                sibling = Path(rel).parents[node.level - 1] / ((node.module or "").replace(".", "/") + ".py")
                assert sibling.as_posix() in standalone.STANDALONE, f"{rel}:{node.lineno} imports {sibling}"
                continue
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "__future__", f"{rel}:{node.lineno} imports {name}"
    assert standalone.package_dir() == Path(locations.__file__).parents[1]
    assert standalone.load("data/locations.py") is locations  # the package's own once it is imported
    with pytest.raises(ValueError, match="standard-library-only"):
        standalone.load("data/fetcher.py")


def test_the_package_entry_is_the_script_entry() -> None:
    assert main is script_main  # fedkernels_cli.main: one implementation, for in-process callers


def test_config_defaults_are_the_parsers() -> None:
    fields = {f.name for f in dataclasses.fields(ExperimentConfig)}
    assert fields == set(defaults.RUN_DEFAULTS)
    a, b = ExperimentConfig(), ExperimentConfig()
    assert dataclasses.asdict(a) == defaults.RUN_DEFAULTS
    a.ks.append(7)
    a.algorithm_options["FedAvg"] = {}
    assert b.ks == [1, 3, 5] and not b.algorithm_options  # each config owns its lists and dicts
    assert defaults.RUN_DEFAULTS["ks"] == [1, 3, 5]
    assert DEFAULT_OPTIONS is defaults.DEFAULT_OPTIONS


def test_standalone_copy_without_the_package(tmp_path: Path) -> None:
    """In a process that never imported fedkernels, the listing's modules are private copies of the files."""
    code = (
        "import sys\nfrom fedkernels_cli import standalone\n"
        "loc = standalone.load('data/locations.py')\n"
        "print(loc.__name__, loc.data_dir(), 'fedkernels' in sys.modules)\n"
    )
    env = dict(os.environ, FEDKERNELS_DATA_DIR=str(tmp_path))
    env["PYTHONPATH"] = str(Path(fedkernels_cli.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert got.stdout.split() == [f"{standalone.STAND_IN}.data.locations", str(tmp_path), "False"]


def test_info_prints_the_torch_free_facts_before_loading_torch(tmp_path: Path, capsys, monkeypatch) -> None:
    code = (
        "import sys\nfrom fedkernels_cli.info import fast_facts\n"
        "lines = fast_facts()\nprint(len(lines), 'torch' in sys.modules, 'fedkernels' in sys.modules)\n"
    )
    env = dict(os.environ, FEDKERNELS_DATA_DIR=str(tmp_path))
    env["PYTHONPATH"] = str(Path(fedkernels_cli.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    assert got.stdout.split() == ["3", "False", "False"]
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(tmp_path))
    assert main(["info"]) == 0
    out = capsys.readouterr().out.splitlines()
    import torch

    assert out[0] == f"package: {standalone.package_dir()}"
    assert out[1].endswith(f"torch {torch.__version__} installed")  # the distribution is the module imported
    assert out[2] == f"data folder: {tmp_path}"
    assert out[3].startswith("fedkernels ") and out[-1].startswith("algorithms: FedAvg")
