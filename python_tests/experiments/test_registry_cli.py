"""The algorithm registry, config files and the ``fedkernels`` CLI end to end on tiny settings."""

from __future__ import annotations

import csv
import json

import pytest

from fedkernels.experiments.experiment import ExperimentConfig, load_config
from fedkernels.fl import FedAvg
from fedkernels.fl.registry import is_registered, make_strategy, strategies
from fedkernels_cli import main, parser
from fedkernels_cli.config import build_config

TINY = [
    "--rounds",
    "2",
    "--clients",
    "3",
    "--clients-per-round",
    "2",
    "--batch-size",
    "32",
    "--no-progress",
    "--algorithms",
    "FedAvg",
    "--option",
    "FedAvg.hidden=[8]",
]
TINY_SYNTH = {"num_samples": 300, "num_features": 8, "num_classes": 20}


def test_registry_finds_exported_strategies():
    reg = strategies()
    assert reg["fedavg"] is FedAvg and is_registered("FEDAVG")
    s = make_strategy("fedavg", hidden=[4], loss="softmax")
    assert isinstance(s, FedAvg) and s.hidden == (4,)
    with pytest.raises(ValueError, match="unknown algorithm 'nope'; registered: FedAvg, FedALC"):
        make_strategy("nope")
    with pytest.raises(ValueError, match="no option"):
        make_strategy("FedAvg", wings=2)


def test_config_precedence(tmp_path):
    cfg_file = tmp_path / "exp.toml"
    cfg_file.write_text('rounds = 7\nclients = 5\npartition = "iid"\n[algorithm_options.FedAvg]\nhidden = [3]\n')
    args = parser().parse_args(["run", "--config", str(cfg_file), "--rounds", "2", "--option", "FedAvg.loss='softmax'"])
    cfg = build_config(args)
    assert (cfg.rounds, cfg.clients, cfg.partition) == (2, 5, "iid")  # the flag beats the file
    assert cfg.algorithm_options["FedAvg"] == {"hidden": [3], "loss": "softmax"}
    (tmp_path / "exp.json").write_text(json.dumps({"rounds": 4, "bogus": 1}))
    with pytest.raises(ValueError, match="unknown config keys"):
        load_config(tmp_path / "exp.json")


def test_config_validation():
    with pytest.raises(ValueError, match="partition"):
        ExperimentConfig(partition="random").validate()
    with pytest.raises(ValueError, match="clients_per_round"):
        ExperimentConfig(clients=2, clients_per_round=3).validate()
    with pytest.raises(ValueError, match="rounds"):
        ExperimentConfig(rounds=0).validate()
    with pytest.raises(ValueError, match="threads"):
        ExperimentConfig(threads=0).validate()


def test_threads_flag_applies_during_the_run_only(tmp_path, monkeypatch):
    import torch

    import fedkernels.experiments.experiment as experiment

    seen = []
    real = experiment.prepare_data
    monkeypatch.setattr(experiment, "prepare_data", lambda cfg: seen.append(torch.get_num_threads()) or real(cfg))
    cfg_file = tmp_path / "exp.json"
    cfg_file.write_text(json.dumps({"synthetic": TINY_SYNTH}))
    before = torch.get_num_threads()
    out = tmp_path / "out"
    assert main(["run", "--config", str(cfg_file), *TINY, "--threads", "1", "--output", str(out)]) == 0
    assert seen == [1] and torch.get_num_threads() == before
    assert json.loads((out / "results.json").read_text())["config"]["threads"] == 1


def test_run_writes_outputs(tmp_path, capsys):
    cfg_file = tmp_path / "exp.json"
    cfg_file.write_text(json.dumps({"synthetic": TINY_SYNTH}))
    assert main(["run", "--config", str(cfg_file), *TINY, "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "\nFedAvg " in out and "P@1" in out and "PSP@1" in out  # PSP@1 shown, or named as left out
    assert "| FedAvg |" in (tmp_path / "out" / "results.md").read_text()
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    r = res["results"][0]
    assert r["algorithm"] == "FedAvg" and len(r["history"]) == 2
    assert r["comm"]["total_up"] == sum(h["bytes_up"] for h in r["history"]) > 0
    rows = list(csv.DictReader((tmp_path / "out" / "rounds.csv").open()))
    assert [int(x["round"]) for x in rows] == [1, 2]
    assert int(rows[1]["cum_bytes_down"]) == r["comm"]["total_down"]
    for row, h in zip(rows, r["history"], strict=True):  # metrics at float32's 7 significant digits, no float64 noise
        for key, value in h["metrics"].items():
            assert row[key] == repr(float(f"{value:.7g}"))


def test_run_bad_input_is_a_clear_error(capsys):
    assert main(["run", *TINY, "--partition", "random"]) == 2
    assert "partition must be one of" in capsys.readouterr().err


def test_unknown_algorithm_message(tmp_path, capsys):
    cfg_file = tmp_path / "exp.json"
    cfg_file.write_text(json.dumps({"synthetic": TINY_SYNTH}))
    code = main(["run", "--config", str(cfg_file), *TINY[:-4], "--algorithms", "nope", "--output", str(tmp_path)])
    assert code == 2 and "unknown algorithm 'nope'" in capsys.readouterr().err


def test_info_and_bench(capsys):
    assert main(["info"]) == 0
    assert "algorithms: FedAvg" in capsys.readouterr().out
    assert main(["bench", "no_such_bench"]) == 2
    assert "not found" in capsys.readouterr().err


def test_demo_compares_fedavg_fedmlh_fedss():
    from fedkernels_cli.config import demo_config

    algos = demo_config()["algorithms"]
    assert algos == ["FedAvg", "FedMLH", "FedSS"] and all(is_registered(a) for a in algos)
    cfg = build_config(parser().parse_args(["run", "--demo", "--rounds", "1"]))
    assert cfg.rounds == 1 and cfg.algorithms == algos and cfg.dataset == "synthetic"
