"""``fedkernels run`` refuses bad settings before any training (exit 2, a message naming the option),
applies options to algorithms named in any case, and fails (exit 1) when every client of a round fails."""

from __future__ import annotations

import json

import pytest

from fedkernels.experiments.experiment import DEFAULT_OPTIONS, ExperimentConfig
from fedkernels_cli import main, parser
from fedkernels_cli.config import build_config

TINY_SYNTH = {"num_samples": 200, "num_features": 8, "num_classes": 20}
TINY = ["--rounds", "2", "--clients", "3", "--clients-per-round", "2", "--batch-size", "32", "--no-progress"]


@pytest.fixture
def synth(tmp_path):
    cfg = tmp_path / "synth.json"
    cfg.write_text(json.dumps({"synthetic": TINY_SYNTH, "local_epochs": 1}))
    return ["--config", str(cfg), "--output", str(tmp_path / "out"), *TINY]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--optimizer", "adamw"], "optimizer"),
        (["--lr", "-1"], "lr must be"),
        (["--lr", "nan"], "lr must be"),
        (["--rounds", "-1"], "rounds must be"),
        (["--clients", "-2"], "clients must be"),
        (["--clients", "3", "--clients-per-round", "5"], "clients_per_round (5) exceeds clients (3)"),
        (["--local-epochs", "-1"], "local_epochs"),
        (["--batch-size", "0"], "batch_size"),
        (["--algorithms", "FedAvg", "--option", "FedMLH.hidden=[4]"], "--option FedMLH.hidden=[4]"),
        (["--algorithms", "FedAvg", "--option", "FedAvg.wings=2"], "no option(s) ['wings']"),
        (["--algorithms", "FedAvg", "fedavg"], "lists FedAvg twice"),
        (["--algorithms", "nope"], "unknown algorithm 'nope'"),
        (["--algorithms", "FedMLH", "--option", "FedMLH.num_buckets=50"], "num_buckets"),
        (["--seeds", "0"], "--seeds"),
    ],
)
def test_mistakes_stop_before_training(synth, tmp_path, capsys, flags, needle):
    assert main(["run", *synth, *flags]) == 2  # flags after the fixture's override them
    err = capsys.readouterr().err
    assert "error:" in err and needle in err
    assert not (tmp_path / "out" / "results.json").exists()  # nothing ran


def test_unknown_optimizer_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"optimizer.*'sgd' or 'adam'.*'adamw'"):
        ExperimentConfig(optimizer="adamw").validate()


def test_fedmlh_refuses_rb_at_least_p_naming_the_options(synth, capsys):
    assert main(["run", *synth, "--algorithms", "FedMLH", "--option", "FedMLH.num_buckets=5"]) == 2
    err = capsys.readouterr().err
    assert "4 * 5 = 20 >= p = 20" in err and "FedMLH.num_buckets" in err and "FedMLH.num_tables" in err


def test_options_match_algorithm_names_in_any_case(synth, tmp_path):
    cfg = build_config(parser().parse_args(["run", *synth, "--algorithms", "fedavg", "--option", "FedAvg.hidden=(4,)"]))
    assert cfg.algorithms == ["FedAvg"] and cfg.options_for("fedavg")["hidden"] == (4,)
    cfg = build_config(parser().parse_args(["run", *synth, "--algorithms", "FedAvg", "--option", "FEDAVG.hidden=[3]"]))
    assert cfg.options_for("FedAvg") == {"hidden": [3]}
    assert main(["run", *synth, "--algorithms", "fedavg", "--option", "FedAvg.hidden=(4,)"]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert res["options"]["hidden"] == [4]
    assert res["history"][0]["bytes_up"] > 0


@pytest.mark.parametrize(("text", "want"), [("false", False), ("False", False), ("TRUE", True), ("true", True)])
def test_bool_options_take_config_file_spelling(synth, text, want):
    """`--option ALG.flag=false` as a config file writes it: a boolean, not the refused string 'false'."""
    args = ["run", *synth, "--algorithms", "PartialExchange", "--option", f"PartialExchange.keep_unreceived={text}"]
    assert build_config(parser().parse_args(args)).options_for("PartialExchange")["keep_unreceived"] is want


def test_defaults_are_linear_and_overridable():
    cfg = ExperimentConfig(algorithms=["FedAvg", "FedMLH"], algorithm_options={"FedMLH": {"hidden": [8]}})
    assert cfg.options_for("FedAvg") == DEFAULT_OPTIONS["FedAvg"] == {"hidden": []}
    assert cfg.options_for("FedMLH") == {"hidden": [8]}
    assert (cfg.optimizer, cfg.lr, cfg.local_epochs) == ("adam", 0.01, 5)


def test_config_file_options_for_unselected_algorithms(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('algorithms = ["FedAvg"]\n[algorithm_options.FedMLH]\nnum_buckets = 4\n')
    with pytest.raises(ValueError, match="options for FedMLH, which is not among the algorithms"):
        build_config(parser().parse_args(["run", "--config", str(f)]))
    # the command line chose the algorithms: the file's options for the others do not apply
    cfg = build_config(parser().parse_args(["run", "--config", str(f), "--algorithms", "FedAvg"]))
    assert cfg.algorithm_options == {}


def test_run_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for text in ("(default: adam)", "(default: 0.01)", "(default: 20)", "(default: 5)", "FedAvg: {'hidden': []}"):
        assert text in " ".join(out.split()), text


def test_every_client_failing_fails_the_run(synth, capsys, monkeypatch):
    from fedkernels.fl.algorithms import FedAvg

    def crash(self, *a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(FedAvg, "client_update", crash)
    assert main(["run", *synth, "--algorithms", "FedAvg"]) == 1
    err = capsys.readouterr().err
    assert "every client of round 1 failed" in err and "RuntimeError: boom" in err


def test_failed_clients_show_in_the_table(synth, capsys, monkeypatch):
    from fedkernels.fl.algorithms import FedAvg

    real = FedAvg.client_update

    def flaky(self, payload, data, config, round, seed):
        if round == 0 and len(data) == min_len[0]:
            raise RuntimeError("flaky")
        return real(self, payload, data, config, round, seed)

    min_len = [0]
    from fedkernels.experiments import experiment

    real_prepare = experiment.prepare_data

    def prepare(cfg):
        data = real_prepare(cfg)
        min_len[0] = min(len(c) for c in data.clients)
        return data

    monkeypatch.setattr(experiment, "prepare_data", prepare)
    monkeypatch.setattr(FedAvg, "client_update", flaky)
    assert main(["run", *synth, "--algorithms", "FedAvg", "--clients-per-round", "3"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("algorithm "))
    row = next(line for line in out.splitlines() if line.startswith("FedAvg "))
    end = header.index("failed clients") + len("failed clients")  # numbers align right under their name
    assert int(row[:end].split()[-1]) >= 1


def test_auto_feature_dim_for_data_too_wide_to_keep_dense():
    from fedkernels.data.datasets import MAX_DENSE_ELEMENTS
    from fedkernels.experiments.experiment import auto_feature_dim

    msg = "x: the training features would be {} x 47236 = 1 dense elements, above the bound; pass feature_dim= to"
    assert auto_feature_dim(msg.format(4800)) == 1 << 14
    dim = auto_feature_dim(msg.format(100_000))
    assert dim is not None and 100_000 * dim <= MAX_DENSE_ELEMENTS < 100_000 * dim * 2
    assert auto_feature_dim("some other ValueError") is None


@pytest.mark.parametrize("p", ["1", "2", "inf"])
def test_the_network_norm_p_takes_every_value_its_preset_sweeps(synth, tmp_path, p):
    """L1DiffNetwork.p is annotated ``float | str`` (its default is the int 2): the option check must let
    "inf" through to the constructor, which the preset's [paper.sweep] over 1, 2, inf relies on."""
    args = ["run", *synth, "--algorithms", "L1DiffNetwork", "--option", f"L1DiffNetwork.p={p}"]
    args += [
        "--option",
        "L1DiffNetwork.num_clients=3",
        "--option",
        "L1DiffNetwork.k=1",
        "--option",
        "L1DiffNetwork.hidden=[4]",
    ]
    args += ["--rounds", "1", "--clients", "3", "--clients-per-round", "3"]
    assert main(args) == 0
    result = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert str(result["options"]["p"]) in (p, f"{p}.0")


@pytest.mark.parametrize("p", ["two", "3", "INF", "1.5"])
def test_a_network_norm_p_out_of_its_set_is_refused_naming_it(synth, capsys, p):
    args = ["run", *synth, "--algorithms", "L1DiffNetwork", "--option", f"L1DiffNetwork.p={p}"]
    args += ["--option", "L1DiffNetwork.num_clients=3", "--option", "L1DiffNetwork.k=1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "p must be" in err and "Traceback" not in err, err


def test_a_required_option_left_out_is_named(synth, capsys):
    assert main(["run", *synth, "--algorithms", "L1DiffNetwork"]) == 2
    err = capsys.readouterr().err
    assert "L1DiffNetwork needs option(s) ['num_clients']" in err and "Traceback" not in err, err


def test_choosing_algorithms_keeps_the_centralised_bound_s_options(tmp_path):
    """--algorithms PartialExchange on a preset whose bound is a centralised FedAvg: the bound keeps the
    preset's FedAvg options (its 52-tensor resmlp), not the default MLP, so it bounds the same model.
    The preset's dataset is found by name in --data-dir; building the config reads none of it."""
    (tmp_path / "rcv1sub1").mkdir()
    preset_args = ["run", "--preset", "partial-rcv1-beta1", "--data-dir", str(tmp_path)]
    full = build_config(parser().parse_args(preset_args))
    chosen = build_config(parser().parse_args([*preset_args, "--algorithms", "PartialExchange"]))
    assert chosen.centralized == ["FedAvg"]
    assert chosen.options_for("FedAvg") == full.options_for("FedAvg")
    assert chosen.options_for("FedAvg")["model"] == "resmlp"
