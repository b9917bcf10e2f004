"""`fedkernels run --metrics --propensity`: the XMC metrics in every run's table and results, the
dataset's propensities by default, and an LF-* filter file applied before scoring."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fedkernels.experiments.experiment import ExperimentConfig, prepare_data
from fedkernels.metrics import inverse_propensity
from fedkernels_cli import main

TINY = ["--rounds", "1", "--clients", "2", "--clients-per-round", "2", "--batch-size", "32", "--no-progress"]
TINY += ["--algorithms", "FedAvg", "--option", "FedAvg.hidden=[8]", "--ks", "1", "3"]


def test_run_reports_the_chosen_metric_families(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # a terminal wide enough for every column
    cfg = tmp_path / "exp.json"
    cfg.write_text(json.dumps({"synthetic": {"num_samples": 200, "num_features": 8, "num_classes": 30}}))
    out_dir = tmp_path / "out"
    argv = ["run", "--config", str(cfg), *TINY, "--metrics", "PSnDCG", "R", "--propensity", "0.6", "2.6"]
    assert main([*argv, "--output", str(out_dir)]) == 0
    shown = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("algorithm "))
    assert shown.split()[1:5] == ["PSnDCG@1", "PSnDCG@3", "R@1", "R@3"]  # the terminal's table
    head = next(line for line in (out_dir / "results.md").read_text().splitlines() if line.startswith("| algorithm"))
    assert "PSnDCG@1 | PSnDCG@3 | R@1 | R@3" in head and "| P@1 |" not in head
    res = json.loads((out_dir / "results.json").read_text())
    final = res["results"][0]["final"]
    assert {"P@3", "nDCG@3", "PSP@3", "PSnDCG@3", "R@3"} <= set(final)  # all computed and saved
    assert res["dataset"]["propensity"] == {"A": 0.6, "B": 2.6, "from": "config"}
    assert main([*argv[:-3], "--metrics", "F1"]) == 2  # an unknown family is refused
    assert "metrics must name some of" in capsys.readouterr().err


def sparse_text(m: sp.csr_matrix) -> str:
    lines = [f"{m.shape[0]} {m.shape[1]}"]
    for i in range(m.shape[0]):
        lo, hi = m.indptr[i], m.indptr[i + 1]
        lines.append(" ".join(f"{c}:{v:g}" for c, v in zip(m.indices[lo:hi], m.data[lo:hi], strict=True)))
    return "\n".join(lines) + "\n"


def test_lf_dataset_by_folder_uses_its_filter_and_propensities(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "LF-AmazonTitles-131K"
    folder.mkdir()
    for part, n in (("trn", 40), ("tst", 10)):
        x = sp.random(n, 6, density=0.5, format="csr", random_state=rng)
        y = sp.random(n, 12, density=0.2, format="csr", random_state=rng)
        y.data[:] = 1
        (folder / f"{part}_X_Xf.txt").write_text(sparse_text(x))
        (folder / f"{part}_X_Y.txt").write_text(sparse_text(y))
    (folder / "filter_labels_test.txt").write_text("0 3\n0 5\n7 11\n")
    cfg = ExperimentConfig(dataset=str(folder), clients=2, clients_per_round=2, max_test=8)
    data = prepare_data(cfg)
    assert data.dataset.notes["propensity"] == {"A": 0.6, "B": 2.6, "from": "dataset table"}  # an Amazon dataset
    counts = torch.bincount(data.dataset.train.indices, minlength=12)
    torch.testing.assert_close(data.inv_propensity, inverse_propensity(counts, 40, 0.6, 2.6))
    fp, fi = data.test_filter
    assert fp.tolist() == [0, 2, 2, 2, 2, 2, 2, 2, 3] and fi.tolist() == [3, 5, 11]  # cut to max_test rows

    from fedkernels.fl import FedAvg, RunConfig, Server

    server = Server(FedAvg(hidden=[4]), data.clients, 6, 12, RunConfig(rounds=1, clients_per_round=2))
    state = server.state
    metrics = server.evaluate(data.test, (1, 3), 4, data.inv_propensity, None, data.test_filter)
    # by hand: predict 3 + 2 (row 0 filters two), drop the filtered ids, score the first k
    top = server.strategy.predict_topk(state, data.test.x, 5)
    kept = [
        [c for c in row if not (i == 0 and c in (3, 5)) and not (i == 7 and c == 11)][:3]
        for i, row in enumerate(top.tolist())
    ]
    truth = [set(data.test.indices[data.test.indptr[i] : data.test.indptr[i + 1]].tolist()) for i in range(8)]
    want_p3 = sum(len(set(r) & t) / 3 for r, t in zip(kept, truth, strict=True)) / 8
    assert metrics["P@3"] == pytest.approx(want_p3)
    assert {"PSP@3", "PSnDCG@3", "R@3"} <= set(metrics)
