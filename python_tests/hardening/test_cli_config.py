"""``fedkernels run`` checks every setting's type and range, the machine's limits and its output and
checkpoint folders before it reads any data (second hostile sweep: 16 of 22 bad values failed late
or badly: TypeError tracebacks at the first evaluation, MemoryError after a minute, an abort inside
libgomp, an existing file as output failing after training with the results lost), refuses to
overwrite per-seed checkpoints without --resume, and resumes FedALC without writing its secret."""

from __future__ import annotations

import json
import stat

import pytest

from fedkernels.experiments import experiment
from fedkernels.experiments.limits import max_clients, usable_cores
from fedkernels_cli import main

TINY_SYNTH = {"num_samples": 200, "num_features": 8, "num_classes": 20}
TINY = ["--rounds", "1", "--clients", "3", "--clients-per-round", "2", "--batch-size", "32", "--no-progress"]


@pytest.fixture
def no_data(monkeypatch):
    """Fails the test if the run reads its data (every bad setting must stop before)."""

    def refuse(cfg):
        raise AssertionError("the run read its data before refusing a bad setting")

    monkeypatch.setattr(experiment, "prepare_data", refuse)


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


BAD = {
    "ks float": ({"ks": [1.5]}, "ks must be"),
    "ks empty": ({"ks": []}, "ks must be"),
    "test_fraction string": ({"test_fraction": "0.2"}, "test_fraction must be"),
    "test_fraction one": ({"test_fraction": 1.0}, "test_fraction must be"),
    "beta string": ({"beta": "x"}, "beta must be"),
    "clients 10**9": ({"clients": 10**9}, "clients must be an integer in [1, "),
    "clients float": ({"clients": 3.0}, "clients must be"),
    "synthetic huge": ({"synthetic": {"num_samples": 10**9, "num_features": 64}}, "synthetic data of num_samples"),
    "synthetic classes huge": ({"synthetic": {"num_classes": 10**8}}, "synthetic.num_classes must lie"),
    "synthetic string": ({"synthetic": {"labels_per_sample": "2"}}, "synthetic.labels_per_sample must be"),
    "synthetic unknown": ({"synthetic": {"bogus": 1}}, "synthetic.bogus is not an argument"),
    "threads 10**6": ({"threads": 10**6}, "threads must be an integer in [1, "),
    "hidden negative": ({"algorithm_options": {"FedAvg": {"hidden": [-5]}}}, "FedAvg.hidden must be a list"),
    "option float for int": ({"algorithm_options": {"FedAvg": {"hidden": [2.5]}}}, "FedAvg.hidden must be"),
    "rounds float": ({"rounds": 1.5}, "rounds must be"),
    "rounds bool": ({"rounds": True}, "rounds must be"),
    "rounds past the checkpoint bound": ({"rounds": 2**31}, "rounds must be"),
    "seed negative": ({"seed": -1}, "seed must be"),
    "seed string": ({"seed": "1"}, "seed must be"),
    "lr string": ({"lr": "0.1"}, "lr must be"),
    "optimizer int": ({"optimizer": 3}, "optimizer must be"),
    "partition int": ({"partition": 5}, "partition must be"),
    "output int": ({"output": 5}, "output must be"),
    "dataset int": ({"dataset": 3}, "dataset must be"),
    "eval_every zero": ({"eval_every": 0}, "eval_every must be"),
    "max_test zero": ({"max_test": 0}, "max_test must be"),
    "feature_dim 2**30": ({"feature_dim": 2**30}, "feature_dim must be"),
    "l2_normalize string": ({"l2_normalize": "yes"}, "l2_normalize must be"),
    "local_epochs 10**9": ({"local_epochs": 10**9}, "local_epochs must be"),
    "algorithms string": ({"algorithms": "FedAvg"}, "algorithms must be"),
    "algorithm_options not tables": ({"algorithm_options": {"FedAvg": 3}}, "algorithm_options must be"),
    "checkpoint int": ({"checkpoint": 7}, "checkpoint must be"),
    "resume string": ({"resume": "true"}, "resume must be"),
    "sparse int": ({"sparse": 1}, "sparse must be"),
    "batch_size 2**40": ({"batch_size": 2**40}, "batch_size must be"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_values_stop_before_any_data_is_read(tmp_path, capsys, no_data, case):
    fields, needle = BAD[case]
    base = {"synthetic": TINY_SYNTH, "local_epochs": 1, "algorithms": ["FedAvg"]}
    if "synthetic" in fields:
        base["synthetic"] = {**TINY_SYNTH, **fields.pop("synthetic")}
    cfg = tmp_path / "c.toml"
    cfg.write_text("\n".join(f"{k} = {_toml_value(v)}" for k, v in {**base, **fields}.items()) + "\n")
    argv = ["run", "--config", str(cfg), "--no-progress"]
    if "output" not in fields:
        argv += ["--output", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err and needle in err, err
    assert "Traceback" not in err


def test_machine_limits_are_the_machine_s():
    assert usable_cores() >= 1 and 1 <= max_clients() < 10**9


def test_existing_file_as_output_stops_before_training(tmp_path, capsys, no_data):
    out = tmp_path / "out"
    out.write_text("not a folder")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"synthetic": TINY_SYNTH, "local_epochs": 1}))
    assert main(["run", "--config", str(cfg), "--output", str(out), *TINY]) == 2
    assert "output " + str(out) + " exists and is not a folder" in capsys.readouterr().err


def test_result_file_in_the_way_stops_before_training(tmp_path, capsys, no_data):
    out = tmp_path / "out"
    (out / "results.json").mkdir(parents=True)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"synthetic": TINY_SYNTH, "local_epochs": 1}))
    assert main(["run", "--config", str(cfg), "--output", str(out), *TINY]) == 2
    assert "results.json exists and is not a file" in capsys.readouterr().err


def test_unwritable_output_folder_stops_before_training(tmp_path, capsys, no_data):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        probe = locked / "probe"
        try:
            probe.write_text("x")  # root ignores permissions: nothing to test then
            pytest.skip("running as a user whose writes ignore folder permissions (root)")
        except PermissionError:
            pass
        cfg = tmp_path / "c.json"
        cfg.write_text(json.dumps({"synthetic": TINY_SYNTH, "local_epochs": 1}))
        assert main(["run", "--config", str(cfg), "--output", str(locked / "out"), *TINY]) == 2
        assert "is not writable" in capsys.readouterr().err
    finally:
        locked.chmod(stat.S_IRWXU)


def _synth_args(tmp_path) -> list[str]:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"synthetic": TINY_SYNTH, "local_epochs": 1}))
    return ["run", "--config", str(cfg), "--output", str(tmp_path / "out"), *TINY, "--algorithms", "FedAvg"]


def test_seeds_rerun_without_resume_refuses_to_overwrite_checkpoints(tmp_path, capsys):
    args = [*_synth_args(tmp_path), "--seeds", "2", "--checkpoint", str(tmp_path / "ck")]
    assert main(args) == 0
    written = sorted(p.relative_to(tmp_path / "ck").as_posix() for p in (tmp_path / "ck").rglob("*.ckpt"))
    assert written == ["seed0/FedAvg.ckpt", "seed1/FedAvg.ckpt"]
    before = {p: p.read_bytes() for p in (tmp_path / "ck").rglob("*.ckpt")}
    capsys.readouterr()
    assert main(args) == 2
    assert "already holds seed0/FedAvg.ckpt" in capsys.readouterr().err
    assert all(p.read_bytes() == b for p, b in before.items())
    assert main([*args, "--resume"]) == 0


def test_fedalc_resumes_from_the_cli_and_never_writes_its_secret(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"synthetic": {**TINY_SYNTH, "labels_per_sample": 1.0}, "local_epochs": 1}))
    base = ["run", "--config", str(cfg), "--output", str(tmp_path / "out"), "--no-progress"]
    base += ["--algorithms", "FedALC", "--option", "FedALC.dim=4", "--option", "FedALC.hidden=[4]"]
    base += ["--partition", "one_label", "--clients-per-round", "2", "--checkpoint", str(tmp_path / "ck")]
    assert main([*base, "--rounds", "1"]) == 0
    secret_file = tmp_path / "ck" / "FedALC.secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text().strip()
    assert main([*base, "--rounds", "2", "--resume"]) == 0
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["results"][0]["resumed_at_round"] == 1
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            assert secret.encode() not in text and bytes.fromhex(secret) not in text, path


def test_pinned_secret_is_redacted_in_results(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"synthetic": {**TINY_SYNTH, "labels_per_sample": 1.0}, "local_epochs": 1}))
    secret = "b'pinned-secret-for-this-test-123'"
    args = ["run", "--config", str(cfg), "--output", str(tmp_path / "out"), "--no-progress", "--rounds", "1"]
    args += ["--algorithms", "FedALC", "--option", "FedALC.dim=4", "--option", "FedALC.hidden=[4]"]
    args += ["--partition", "one_label", "--clients-per-round", "2", "--option", f"FedALC.client_secret={secret}"]
    assert main(args) == 0
    text = (tmp_path / "out" / "results.json").read_text()
    assert "pinned-secret-for-this-test" not in text and "<redacted; key id " in text
