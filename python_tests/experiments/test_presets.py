"""Presets (schema, shipping, ``run --preset`` over seeds), the seeds' mean ± std, resuming from
checkpoints, and the bench listing."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from fedkernels.experiments import ExperimentConfig, list_presets, load_preset, preset_names, seed_summary
from fedkernels.experiments.presets import parse_preset, resolve_preset_dataset
from fedkernels.experiments.seeds import seed_table
from fedkernels_cli import main
from python_tests.support.paths import ROOT
from python_tests.support.scripts import load_script

CPU_PRESETS = {"fedmlh-bibtex", "fedmlh-delicious", "fedss-bibtex", "partial-bibtex", "l1diff-bibtex"}

TINY_PRESET = """
algorithms = ["FedAvg", "FedMLH"]
dataset = "synthetic"
synthetic = {num_samples = 200, num_features = 8, num_classes = 40}
clients = 3
clients_per_round = 2
rounds = 2
local_epochs = 1
batch_size = 32
[algorithm_options.FedAvg]
hidden = [4]
[paper]
source = "a test"
dataset_note = "synthetic"
[paper.p_at_1]
fedavg = 12.5
"""


def test_shipped_presets_parse_and_validate():
    names = set(preset_names())
    assert names >= CPU_PRESETS
    for p in list_presets():
        assert p.source and p.dataset_note and p.summary()
        ExperimentConfig(**p.config).validate()  # every algorithm and option exists
        assert all(0 <= v <= 100 for v in p.p_at_1.values())
        if p.sweep is not None:
            alg, _, key = p.sweep.option.partition(".")
            assert alg in p.config["algorithms"] and key


def test_presets_ship_in_the_package():
    from importlib import resources

    files = {f.name for f in (resources.files("fedkernels.experiments") / "presets").iterdir()}
    assert {f"{n}.toml" for n in CPU_PRESETS} <= files
    # scikit-build-core copies every file under wheel.packages: the TOML files land in the wheel
    skb = pytest.importorskip("scikit_build_core.build._pathutil")
    root = ROOT
    mapping = skb.packages_to_file_mapping(
        packages={"fedkernels": str(root / "src" / "fedkernels")},
        platlib_dir=Path("/wheel"),
        include=[],
        src_exclude=[],
        target_exclude=[],
        build_dir="build/x",
        mode="default",
    )
    shipped = {Path(t).name for t in mapping.values() if "/presets/" in t}
    assert {f"{n}.toml" for n in CPU_PRESETS} <= shipped


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("rounds = 2\n", "needs a [paper] table"),
        ('rounds = 2\n[paper]\ndataset_note = "x"\n[paper.p_at_1]\n', "paper.source"),
        ('rounds = 2\n[paper]\nsource = "x"\n[paper.p_at_1]\n', "paper.dataset_note"),
        ('[paper]\nsource = "x"\ndataset_note = "y"\n[paper.p_at_1]\nFedAvg = 120\n', "percentage"),
        ('[paper]\nsource = "x"\ndataset_note = "y"\nyear = 2022\n', "unknown [paper] keys ['year']"),
        ('wings = 1\n[paper]\nsource = "x"\ndataset_note = "y"\n', "unknown config keys ['wings']"),
        ('[paper]\nsource = "x"\ndataset_note = "y"\n[paper.sweep]\noption = "lr"\nvalues = [1]\n', "ALGORITHM.key"),
        (
            '[paper]\nsource = "x"\ndataset_note = "y"\n[paper.sweep]\noption = "A.b"\nvalues = [1, 2]\np_at_1 = [1]\n',
            "one percentage per value",
        ),
    ],
)
def test_schema_errors_name_the_key(text, needle):
    with pytest.raises(ValueError, match=None) as e:
        parse_preset("t", text, "t.toml")
    assert needle in str(e.value) and "t.toml" in str(e.value)


def test_unknown_preset_lists_the_shipped_ones(capsys):
    with pytest.raises(ValueError, match=r"unknown preset 'nope'; shipped presets: .*fedmlh-bibtex"):
        load_preset("nope")
    assert main(["run", "--preset", "nope"]) == 2


def test_list_presets_one_line_each(capsys):
    assert main(["run", "--list-presets"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()  # a header, then one line each; a note below
    assert table[0].split()[:3] == ["preset", "data", "rounds"]
    assert [line.split()[0] for line in table[1:]] == preset_names()


def test_dataset_names_resolve_under_data_dir(tmp_path):
    (tmp_path / "bibtex").mkdir()
    assert resolve_preset_dataset("bibtex", tmp_path) == str(tmp_path / "bibtex")
    assert resolve_preset_dataset("synthetic", tmp_path) == "synthetic"
    with pytest.raises(FileNotFoundError, match=f"'no_such_set' not found, looked in: {tmp_path / 'no_such_set'}, "):
        resolve_preset_dataset("no_such_set", tmp_path)


def _result(alg, p1, p3=0.1, p5=0.1):
    return {"algorithm": alg, "final": {"P@1": p1, "P@3": p3, "P@5": p5}, "model_bytes": 2e6, "failed_clients": 1}


def test_seed_summary_mean_and_sample_std():
    runs = [[_result("FedAvg", 0.40), _result("FedMLH", 0.5)], [_result("FedAvg", 0.44), _result("FedMLH", 0.52)]]
    runs.append([_result("FedAvg", 0.39), _result("FedMLH", 0.47)])
    rows = seed_summary(runs, {"fedmlh": 47.0})
    avg, mlh = rows
    assert (avg["algorithm"], avg["seeds"], mlh["algorithm"]) == ("FedAvg", 3, "FedMLH")
    assert avg["P@1 mean"] == pytest.approx(statistics.mean([0.40, 0.44, 0.39]))
    assert avg["P@1 std"] == pytest.approx(statistics.stdev([0.40, 0.44, 0.39]))
    assert avg["paper P@1"] is None and mlh["paper P@1"] == pytest.approx(0.47)
    assert avg["failed clients"] == 3 and avg["model MB"] == pytest.approx(2.0)
    one = seed_summary([[_result("FedAvg", 0.4)]])
    assert one[0]["P@1 std"] is None and one[0]["P@1 mean"] == 0.4  # one seed has no spread
    assert "±" not in seed_table(one) and "| 0.4000 |" in seed_table(one)
    assert "| 0.4500 ± 0.0707 |" in seed_table(seed_summary([[_result("FedAvg", 0.4)], [_result("FedAvg", 0.5)]]))


def test_run_preset_over_seeds(tmp_path, capsys):
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY_PRESET)
    out = tmp_path / "out"
    assert main(["run", "--preset", str(preset), "--seeds", "2", "--no-progress", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mean ± std over 2 seeds" in text and "paper: a test" in text
    summary = json.loads((out / "seeds.json").read_text())
    assert summary["seeds"] == [0, 1] and [r["algorithm"] for r in summary["rows"]] == ["FedAvg", "FedMLH"]
    per_seed = [json.loads((out / f"seed{s}" / "results.json").read_text()) for s in (0, 1)]
    p1 = [r["results"][0]["final"]["P@1"] for r in per_seed]
    assert summary["rows"][0]["P@1 mean"] == pytest.approx(statistics.mean(p1))
    assert summary["rows"][0]["paper P@1"] == pytest.approx(0.125)
    assert [r["config"]["seed"] for r in per_seed] == [0, 1]
    # a preset with --algorithms: the preset's options for the other algorithms drop out
    assert main(["run", "--preset", str(preset), "--seeds", "1", "--algorithms", "fedmlh", "--no-progress",
                 "--output", str(tmp_path / "o2")]) == 0  # fmt: skip
    text = capsys.readouterr().out.split("== seed 0 (1/1) ==")[1]
    summary = text[text.index("one seed (--seeds N for mean ± std), final round; paper: a test") :]
    assert "±" not in summary.split("\n", 1)[1]  # one seed: values alone, no spread of 0
    assert summary.splitlines()[-3] == "synthetic"  # the preset's note under the table
    row = json.loads((tmp_path / "o2" / "seeds.json").read_text())["rows"][0]
    assert row["seeds"] == 1 and row["P@1 std"] is None


def test_a_preset_whose_rows_are_equal_says_why():
    note = load_preset("fedss-bibtex").dataset_note  # printed under the table of every run of the preset
    assert "two rows are equal" in note and "every row" in note


def test_resume_continues_a_checkpointed_run(tmp_path, capsys):
    preset = tmp_path / "tiny.toml"
    preset.write_text(TINY_PRESET.replace("rounds = 2", "rounds = 3"))
    base = ["run", "--config", str(tmp_path / "c.toml"), "--no-progress", "--algorithms", "FedAvg"]
    (tmp_path / "c.toml").write_text(TINY_PRESET.split("[paper]")[0].replace('"FedAvg", "FedMLH"', '"FedAvg"'))
    full, part = tmp_path / "full", tmp_path / "part"
    assert main([*base, "--rounds", "3", "--output", str(full)]) == 0
    ckpt = tmp_path / "ckpt"
    assert main([*base, "--rounds", "2", "--output", str(part), "--checkpoint", str(ckpt)]) == 0
    assert (ckpt / "FedAvg.ckpt").is_file()
    # the folder holds a run: starting over it without --resume is refused
    assert main([*base, "--rounds", "3", "--output", str(part), "--checkpoint", str(ckpt)]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main([*base, "--rounds", "3", "--output", str(part), "--checkpoint", str(ckpt), "--resume"]) == 0
    a = json.loads((full / "results.json").read_text())["results"][0]
    b = json.loads((part / "results.json").read_text())["results"][0]
    assert b["resumed_at_round"] == 2 and len(b["history"]) == 3
    assert b["final"] == a["final"]  # bit-identical to the uninterrupted run
    assert [h["metrics"] for h in b["history"]] == [h["metrics"] for h in a["history"]]
    assert [h["bytes_up"] for h in b["history"]] == [h["bytes_up"] for h in a["history"]]


def test_resume_with_other_settings_is_refused(tmp_path, capsys):
    (tmp_path / "c.toml").write_text(TINY_PRESET.split("[paper]")[0].replace('"FedAvg", "FedMLH"', '"FedAvg"'))
    base = ["run", "--config", str(tmp_path / "c.toml"), "--no-progress", "--output", str(tmp_path / "o")]
    assert main([*base, "--checkpoint", str(tmp_path / "k")]) == 0
    assert main([*base, "--checkpoint", str(tmp_path / "k"), "--resume", "--lr", "0.5"]) == 2
    assert "train.lr" in capsys.readouterr().err


def test_bench_lists_what_exists(capsys):
    assert main(["bench"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert {"sketch", "prox", "fl_fedmlh"} <= set(names) and "common" not in names
    assert not [n for n in names if n.endswith("_worker")] and "issue" not in out


def test_quick_bench_runs_never_write_the_committed_tables():
    common = load_script(ROOT / "bench" / "common.py")
    assert common.results_path("prox", "cpu", None, quick=True).parent == common.QUICK_RESULTS
    assert common.RESULTS not in common.results_path("prox", "cpu", None, quick=True).parents
    assert common.results_path("prox", "cpu", None) == common.QUICK_RESULTS / "prox.json"
    assert common.results_path("prox", "cpu", Path("x.json"), quick=True) == Path("x.json")
