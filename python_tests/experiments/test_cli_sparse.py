"""``fedkernels run --sparse`` (config key ``sparse``): a file dataset's features stay ``torch.sparse_csr``
from file to model, and one round gives the dense run's result for the same seed (on a small synthetic
dataset folder: what is under test is the path from file to model, not the data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedkernels.experiments.experiment import ExperimentConfig, prepare_data
from fedkernels_cli import main, parser
from fedkernels_cli.config import build_config
from python_tests.support.xc_folder import write_xc_folder

MAX_TEST = 400
# one round, two clients of three, one local epoch: seconds on one thread
ONE_ROUND = [
    "--algorithms",
    "FedAvg",
    "FedMLH",
    "--rounds",
    "1",
    "--clients",
    "3",
    "--clients-per-round",
    "2",
    "--local-epochs",
    "1",
    "--max-test",
    str(MAX_TEST),
    "--threads",
    "1",
    "--no-progress",
]


def _finals(out: Path) -> dict[str, dict[str, float]]:
    res = json.loads((out / "results.json").read_text())
    return {r["algorithm"]: r["final"] for r in res["results"]}


@pytest.fixture(scope="module")
def xc_folder(tmp_path_factory) -> Path:
    """A file dataset: 900 training and 400 test rows, 512 features, 40 labels."""
    return write_xc_folder(tmp_path_factory.mktemp("xc"), 900, MAX_TEST, num_features=512, num_labels=40)


def test_sparse_and_dense_give_the_same_round(tmp_path, xc_folder):
    one_round = ["--dataset", str(xc_folder), *ONE_ROUND]
    assert main(["run", *one_round, "--sparse", "--output", str(tmp_path / "sparse")]) == 0
    assert main(["run", *one_round, "--output", str(tmp_path / "dense")]) == 0
    sparse, dense = _finals(tmp_path / "sparse"), _finals(tmp_path / "dense")
    assert sparse.keys() == dense.keys() == {"FedAvg", "FedMLH"}
    # sparse and dense matmuls sum in different orders: a test row whose top scores tie to float
    # rounding may rank differently, so allow two of the MAX_TEST rows to differ
    tol = 2 / MAX_TEST
    for alg in dense:
        for metric, value in dense[alg].items():
            assert sparse[alg][metric] == pytest.approx(value, abs=tol), (alg, metric)
    notes = json.loads((tmp_path / "sparse" / "results.json").read_text())
    assert notes["config"]["sparse"] is True and notes["dataset"]["sparse"] is True
    assert json.loads((tmp_path / "dense" / "results.json").read_text())["config"]["sparse"] is False


def test_sparse_features_reach_the_clients_as_csr(xc_folder):
    cfg = ExperimentConfig(dataset=str(xc_folder), sparse=True, clients=3, clients_per_round=2)
    data = prepare_data(cfg)
    assert all(c.x.layout.__repr__() == "torch.sparse_csr" for c in data.clients)
    assert data.test.x.layout.__repr__() == "torch.sparse_csr"
    dense = prepare_data(ExperimentConfig(dataset=str(xc_folder), clients=3, clients_per_round=2))
    assert all(c.x.layout.__repr__() == "torch.strided" for c in dense.clients)
    # the same rows in the same order, the same values
    for s, d in zip(data.clients, dense.clients, strict=True):
        assert s.x.to_dense().equal(d.x)


def test_sparse_key_from_a_config_file_and_the_flag_overrides_it(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("sparse = true\n")
    assert build_config(parser().parse_args(["run", "--config", str(cfg)])).sparse is True
    assert build_config(parser().parse_args(["run", "--config", str(cfg), "--no-sparse"])).sparse is False
    assert build_config(parser().parse_args(["run"])).sparse is False


def test_sparse_must_be_a_bool(tmp_path, capsys):
    cfg = tmp_path / "run.json"
    cfg.write_text(json.dumps({"sparse": "yes"}))
    assert main(["run", "--config", str(cfg), "--no-progress", "--output", str(tmp_path / "out")]) == 2
    assert "sparse must be true or false" in capsys.readouterr().err
