"""The first hour's dead ends around stopping and resuming a run: Ctrl-C prints one line that says
how to go on, ``--resume`` with nothing to resume says so, and a resumed run's progress bar and
byte count continue from the checkpoint instead of restarting at zero."""

from __future__ import annotations

import json
import re
import sys

import pytest

from fedkernels_cli import main

CONFIG = """
algorithms = ["FedAvg"]
dataset = "synthetic"
synthetic = {num_samples = 200, num_features = 8, num_classes = 40}
clients = 3
clients_per_round = 2
local_epochs = 1
batch_size = 32
[algorithm_options.FedAvg]
hidden = [4]
"""


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(CONFIG)
    return path


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_without_checkpoint_prints_one_line_and_no_traceback(tmp_path, config, capsys, monkeypatch):
    monkeypatch.setattr("fedkernels.experiments.experiment.run_algorithm", _interrupt)
    argv = ["run", "--config", str(config), "--no-progress", "--output", str(tmp_path / "o"), "--no-checkpoint"]
    assert main(argv) == 130
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "Traceback" not in err
    assert "interrupted" in err and "Nothing was saved" in err


@pytest.mark.parametrize("explicit", [False, True])
def test_ctrl_c_names_the_resume_command(tmp_path, config, capsys, monkeypatch, explicit):
    monkeypatch.setattr("fedkernels.experiments.experiment.run_algorithm", _interrupt)
    argv = ["run", "--config", str(config), "--no-progress", "--output", str(tmp_path / "o")]
    argv += ["--checkpoint", str(tmp_path / "k")] if explicit else []  # default: <output>/checkpoints
    monkeypatch.setattr(sys, "argv", ["fedkernels", *argv])  # as the console script sees it
    assert main(argv) == 130
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.endswith("fedkernels " + " ".join(argv) + " --resume")


def test_an_interrupted_run_resumes_from_the_default_checkpoint_which_goes_at_the_end(tmp_path, config, capsys):
    out = tmp_path / "o"
    base = ["run", "--config", str(config), "--no-progress", "--output", str(out)]
    assert main([*base, "--rounds", "2"]) == 0
    assert not (out / "checkpoints").exists()  # a finished run leaves nothing to resume
    full = json.loads((out / "results.json").read_text())["results"][0]
    # a run stopped after round 1 (as Ctrl-C would): its checkpoint stays and a plain rerun is refused
    cfg_dir = tmp_path / "stopped"
    assert main([*base, "--rounds", "1", "--output", str(cfg_dir), "--checkpoint", str(out / "checkpoints")]) == 0
    assert (out / "checkpoints" / "FedAvg.ckpt").is_file()
    assert main([*base, "--rounds", "2"]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert main([*base, "--rounds", "2", "--resume"]) == 0
    assert "FedAvg: resumed from its checkpoint after 1 rounds; continuing at round 2 of 2" in capsys.readouterr().out
    resumed = json.loads((out / "results.json").read_text())["results"][0]
    assert resumed["resumed_at_round"] == 1 and resumed["final"] == full["final"]
    assert not (out / "checkpoints").exists()


def test_no_checkpoint_with_checkpoint_or_resume_is_refused(tmp_path, config, capsys):
    base = ["run", "--config", str(config), "--no-progress", "--output", str(tmp_path / "o"), "--no-checkpoint"]
    assert main([*base, "--resume"]) == 2
    assert main([*base, "--checkpoint", str(tmp_path / "k")]) == 2
    assert "--no-checkpoint goes with neither" in capsys.readouterr().err


def test_resume_with_nothing_to_resume_says_so(tmp_path, config, capsys):
    argv = ["run", "--config", str(config), "--no-progress", "--rounds", "1", "--output", str(tmp_path / "o")]
    assert main([*argv, "--checkpoint", str(tmp_path / "empty"), "--resume"]) == 0
    assert "no checkpoint to resume in" in capsys.readouterr().err


def test_a_resumed_progress_bar_counts_from_the_checkpoint(tmp_path, config, capsys):
    base = ["run", "--config", str(config), "--checkpoint", str(tmp_path / "k")]
    assert main([*base, "--no-progress", "--rounds", "2", "--output", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main([*base, "--rounds", "3", "--output", str(tmp_path / "b"), "--resume"]) == 0
    err = capsys.readouterr().err
    history = json.loads((tmp_path / "b" / "results.json").read_text())["results"][0]["history"]
    total_mb = sum(h["bytes_up"] + h["bytes_down"] for h in history) / 1e6
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert re.search(r"\b3/3\b", last), last  # not 1/3: the two checkpointed rounds count
    assert f"MB={total_mb:.1f}" in last, (last, total_mb)
    assert "no checkpoint to resume" not in err


def test_a_finished_fedalc_run_leaves_no_secret_behind(tmp_path, capsys):
    cfg = tmp_path / "alc.toml"
    cfg.write_text(CONFIG.replace('["FedAvg"]', '["FedALC"]').replace("[algorithm_options.FedAvg]\nhidden = [4]\n", ""))
    out = tmp_path / "o"
    argv = ["run", "--config", str(cfg), "--no-progress", "--rounds", "1", "--output", str(out)]
    assert main([*argv, "--partition", "one_label"]) == 0
    assert json.loads((out / "results.json").read_text())["results"][0]["algorithm"] == "FedALC"
    assert not (out / "checkpoints").exists()
