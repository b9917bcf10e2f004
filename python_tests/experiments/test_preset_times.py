"""A preset's ``[measured]`` table is what its committed runs took (tools/dev/preset_times.py), and a
malformed one is an error naming the file."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from fedkernels.experiments import list_presets
from fedkernels.experiments.presets import parse_preset
from python_tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
PAPER = '[paper]\nsource = "x"\ndataset_note = "y"\n[paper.p_at_1]\n'
GOOD = '[measured]\nseconds_per_seed = 12\nseeds = 2\nruns = "r"\nmachine = "m"\n'


def test_measured_tables_are_the_committed_runs() -> None:
    tool = load_script(ROOT / "tools" / "dev" / "preset_times.py")
    for preset in list_presets():
        runs = sorted((ROOT / "bench" / "results" / "fl" / "paper" / preset.name).glob("seed*/results.json"))
        if not runs:
            assert preset.measured == {}, preset.name
            continue
        per_seed = [sum(r["seconds"] for r in json.loads(f.read_text())["results"]) for f in runs]
        assert preset.measured["seconds_per_seed"] == round(statistics.median(per_seed)), preset.name
        assert preset.measured["seeds"] == len(runs)
        assert preset.measured == tool.measured(preset.name)  # the file is what the tool writes today


def test_rewrite_replaces_the_table(tmp_path: Path) -> None:
    tool = load_script(ROOT / "tools" / "dev" / "preset_times.py")
    f = tmp_path / "p.toml"
    f.write_text("rounds = 2\n" + PAPER + GOOD)
    table = {"seconds_per_seed": 5, "seeds": 1, "runs": "a", "machine": "b"}
    text = tool.rewrite(f, table)
    assert parse_preset("p", text, "p").measured == table
    assert text.count("[measured]") == 1
    assert "[measured]" not in tool.rewrite(f, None)


@pytest.mark.parametrize(
    ("measured", "error"),
    [
        ("[measured]\nseconds_per_seed = 12\n", "exactly"),
        (GOOD.replace("12", "-1"), "positive number"),
        (GOOD.replace("seeds = 2", "seeds = 0"), "positive integer"),
        (GOOD.replace('"m"', '""'), "non-empty strings"),
    ],
)
def test_a_malformed_measured_table_is_an_error(measured: str, error: str) -> None:
    assert parse_preset("p", PAPER + GOOD, "p").measured["seconds_per_seed"] == 12
    with pytest.raises(ValueError, match=error):
        parse_preset("p", PAPER + measured, "preset p")
