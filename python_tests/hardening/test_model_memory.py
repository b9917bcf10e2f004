"""Model sizes checked against the machine before any data is read (issue "The third hostile sweep",
items 2 and 6): ``FedAvg.hidden = [10**6, 10**6]`` passed every check and ended in a 4 TB allocation
after the data was loaded, and a 108-byte dataset declaring 2**26 classes grew a run to 3.4 GB before a
third-party panic. Each algorithm's parameter count is checked here against the state its
``init_state`` really builds, and the run is refused with one line naming the setting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.experiments import experiment
from fedkernels.experiments.experiment import ExperimentConfig
from fedkernels.experiments.model_memory import (
    DataShape,
    bytes_needed,
    check_model_memory,
    config_shape,
    footprint,
)
from fedkernels.fl.registry import make_strategy, strategies
from fedkernels_cli import main
from python_tests.fuzz.targets import OPTIONS

# each registered strategy with wider options than the fuzzers' (two hidden layers, other sizes)
WIDER: dict[str, dict] = {
    "fedavg": [{"hidden": (5, 3)}, {"hidden": (6,), "model": "resmlp", "blocks": 2}],
    "fedaws": [{"dim": 5, "hidden": (4, 3)}, {"dim": 5, "hidden": (3,), "model": "embed", "embed_dim": 7}],
    "fedmlh": [{"num_tables": 3, "num_buckets": 5, "hidden": (4, 2)}, {"num_tables": 2, "num_buckets": 3}],
    "fedss": [{"num_negatives": 2, "embed_dim": 6, "hidden": (5,), "server_momentum": 0.9}],
    "l1diffnetwork": [{"num_clients": 3, "hidden": (4, 6)}],
    "partialexchange": [{"hidden": (4, 4), "keep_unreceived": True}],
}


def _cases() -> list[tuple[str, dict]]:
    out = [(name, OPTIONS[name]) for name in sorted(strategies())]
    return out + [(name, opts) for name, many in WIDER.items() for opts in many]


@pytest.mark.parametrize("name, options", _cases(), ids=lambda v: v if isinstance(v, str) else "")
@settings(max_examples=6, deadline=None, derandomize=True)
@given(d=st.integers(1, 40), p=st.integers(20, 60))
def test_parameter_count_is_the_state_init_state_builds(name, options, d, p):
    s = make_strategy(name, **options)
    fp = footprint(s, DataShape(10, 10, d, p, "test"))
    assert fp is not None, f"{name}: no footprint (model_memory.footprint must know every registered strategy)"
    state = s.init_state(d, p, 0)
    real = sum(t.numel() * t.element_size() for t in state.values() if t.is_floating_point())
    # the weights exactly; beside them only float64 scalars of bookkeeping (L1Diff's gamma, the graph gap)
    assert fp.param_bytes <= real <= fp.param_bytes + 16, (name, options, fp, real)


def test_bytes_needed_counts_state_copy_gradients_moments_and_activations():
    fp = footprint(make_strategy("FedAvg", hidden=[10]), DataShape(1000, 500, 20, 30, "test"))
    n = 20 * 10 + 10 + 10 * 30 + 30
    assert fp.parameters == n and fp.train_width == 40 and fp.eval_width == 10
    shape = DataShape(1000, 500, 20, 30, "test")
    # sgd: state + download + client copy + gradients; adam adds two moments; 16 bytes a class;
    # activations: 2 x 4 x 64 x 40 training
    assert bytes_needed(fp, shape, 64, "sgd") == 4 * 4 * n + 16 * 30 + 2 * 4 * 64 * 40
    assert bytes_needed(fp, shape, 64, "adam") == 6 * 4 * n + 16 * 30 + 2 * 4 * 64 * 40
    # a batch never holds more rows than the largest client, an evaluation batch than the test set
    small = DataShape(8, 3, 20, 30, "test")
    assert bytes_needed(fp, small, 64, "sgd") == 4 * 4 * n + 16 * 30 + max(2 * 4 * 8 * 40, 4 * 3 * 10)


def test_the_issue_model_is_refused_naming_the_setting():
    s = make_strategy("FedAvg", hidden=[10**6, 10**6])
    shape = DataShape(100, 100, 100, 5000, "synthetic")
    n = 100 * 10**6 + 10**6 + 10**12 + 10**6 + 10**6 * 5000 + 5000
    # a 3.7 TiB model can never be sent to a client (a payload carries at most 2 GiB), whatever the machine
    with pytest.raises(ValueError) as e:
        check_model_memory([s], shape, 64, "adam", budget=1 << 60)
    msg = str(e.value)
    assert "\n" not in msg and "blocks" not in msg  # one line; only the options that size this model
    for want in ("FedAvg: ", "(synthetic; FedAvg.hidden=[1000000, 1000000])", f"would be {4 * n / 2**40:.1f} TiB"):
        assert want in msg, msg
    assert "d=100 features and p=5000 classes" in msg and "2.00 GiB a payload may carry" in msg


def test_a_model_the_machine_cannot_train_is_refused_naming_the_setting():
    s = make_strategy("FedAvg", hidden=[4096])
    shape = DataShape(100, 100, 100, 5000, "synthetic")
    n = 100 * 4096 + 4096 + 4096 * 5000 + 5000
    with pytest.raises(ValueError) as e:
        check_model_memory([s], shape, 64, "adam", budget=64 << 20)
    msg = str(e.value)
    for want in (f"{n:,} parameters", "(synthetic; FedAvg.hidden=[4096]; batch_size=64)"):
        assert want in msg, msg
    assert "more than the 0.06 GiB this machine has available" in msg
    check_model_memory([s], shape, 64, "adam", budget=1 << 40)  # the same model where it fits


def test_activations_of_a_huge_batch_are_refused_naming_the_batch_size():
    # a small model (36 MiB) whose 2**20-wide layer, at 2**20 rows a batch, needs 8 TiB of activations
    s = make_strategy("FedAvg", hidden=[2**20])
    shape = DataShape(2**20, 100, 4, 4, "synthetic")
    with pytest.raises(ValueError, match=r"FedAvg.hidden=\[1048576\]; batch_size=1048576\)"):
        check_model_memory([s], shape, 2**20, "sgd", budget=1 << 40)
    check_model_memory([s], shape, 64, "sgd", budget=1 << 40)  # the same model at 64 rows a batch
    # a batch holds at most the largest client's rows
    check_model_memory([s], DataShape(64, 100, 4, 4, "synthetic"), 2**20, "sgd", budget=1 << 40)


def test_payload_bound_is_on_what_a_client_exchanges():
    # FedSS keeps p class rows on the server but a client downloads its sampled rows only; its full-softmax
    # variant downloads them all
    shape = DataShape(64, 64, 16, 2**25, "test")
    check_model_memory([make_strategy("FedSS", embed_dim=64, hidden=[])], shape, 64, "sgd", budget=1 << 60)
    with pytest.raises(ValueError, match="FedSS-FullSoftmax: a client's download or upload"):
        check_model_memory([make_strategy("FedSS-FullSoftmax", embed_dim=64, hidden=[])], shape, 64, "sgd", 1 << 60)


@pytest.fixture
def no_data(monkeypatch):
    """Fails the test if the run reads its data (the refusal must come first)."""

    def refuse(cfg):
        raise AssertionError("the run read its data before refusing its model")

    monkeypatch.setattr(experiment, "prepare_data", refuse)


def test_cli_refuses_the_issue_model_before_reading_data(tmp_path, capsys, no_data):
    cfg = tmp_path / "c.toml"
    cfg.write_text('algorithms = ["FedAvg"]\n[algorithm_options.FedAvg]\nhidden = [1000000, 1000000]\n')
    code = main(["run", "--config", str(cfg), "--output", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "FedAvg.hidden=[1000000, 1000000]" in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


def test_a_tiny_file_declaring_2pow26_classes_is_refused_before_reading(tmp_path, capsys, no_data):
    data = tmp_path / "d"
    data.mkdir()
    # the issue's 108-byte dataset: two files whose headers declare 2**26 classes
    (data / "train.txt").write_text(f"4 8 {2**26}\n0 0:1\n1 1:1\n2 2:1\n3 3:1\n")
    (data / "test.txt").write_text(f"2 8 {2**26}\n0 0:1\n1 1:1\n")
    assert len((data / "train.txt").read_bytes()) + len((data / "test.txt").read_bytes()) < 108
    # the default algorithms (linear FedAvg and FedMLH): FedAvg's 2.25 GiB model cannot be exchanged
    code = main(["run", "--dataset", str(data), "--output", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    for want in ("FedAvg: a client's download or upload", "d=8 features and p=67108864", f"declared by {data}"):
        assert want in err, err


def test_config_shape_takes_the_declared_and_synthetic_sizes(tmp_path):
    cfg = ExperimentConfig(synthetic={"num_samples": 1000, "num_features": 12, "num_classes": 34}, clients=10)
    shape = config_shape(cfg)
    assert (shape.num_features, shape.num_classes, shape.test_rows, shape.train_rows) == (12, 34, 200, 80)
    (tmp_path / "train.txt").write_text("3 8 50\n0 0:1\n1 1:1\n2 2:1\n")
    (tmp_path / "test.txt").write_text("2 8 50\n0 0:1\n1 1:1\n")
    shape = config_shape(ExperimentConfig(dataset=str(tmp_path), clients=2, feature_dim=64))
    assert (shape.num_features, shape.num_classes, shape.test_rows, shape.train_rows) == (64, 50, 2, 2)
    assert config_shape(ExperimentConfig(dataset=str(tmp_path / "missing"))) is None  # the load reports it
    # too wide to keep dense: the load hashes the features to 2**14 columns, so the model is sized by that
    (tmp_path / "train.txt").write_text(f"3 {2**26} 50\n0 0:1\n1 1:1\n2 2:1\n")
    (tmp_path / "test.txt").write_text(f"2 {2**26} 50\n0 0:1\n1 1:1\n")
    assert config_shape(ExperimentConfig(dataset=str(tmp_path), clients=2)).num_features == 2**14
    assert config_shape(ExperimentConfig(dataset=str(tmp_path), clients=2, sparse=True)).num_features == 2**26


def test_a_run_that_fits_still_runs(tmp_path):
    argv = ["run", "--rounds", "1", "--clients", "3", "--clients-per-round", "2", "--algorithms", "FedAvg"]
    out = tmp_path / "o"
    assert main([*argv, "--output", str(out), "--no-progress", "--option", "FedAvg.hidden=[16]"]) == 0
    assert (out / "results.json").is_file()


@pytest.mark.parametrize("name", sorted(strategies()))
def test_exchanged_bytes_are_a_lower_bound_of_a_real_round(name):
    from python_tests.fuzz.targets import NUM_CLASSES, NUM_FEATURES, strategy_case

    case = strategy_case(name)
    fp = footprint(case.strategy, DataShape(10, 10, NUM_FEATURES, NUM_CLASSES, "test"))
    down = sum(t.numel() * t.element_size() for t in case.down.values())
    up = len(case.raw_upload)
    assert fp.exchanged_bytes <= max(down, up), (name, fp.exchanged_bytes, down, up)
