"""The paper presets (src/fedkernels/experiments/presets) and the raw-feature option they rely on."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import tomllib
import torch

from fedkernels.experiments.experiment import ExperimentConfig, prepare_data
from python_tests.support.paths import ROOT

PRESETS = ROOT / "src" / "fedkernels" / "experiments" / "presets"
MINE = ["fedaws-bibtex", "fedalc-bibtex"]


@pytest.mark.parametrize("name", MINE)
def test_preset_is_a_valid_experiment_with_paper_rows(name):
    data = tomllib.loads((PRESETS / f"{name}.toml").read_text())
    paper = data.pop("paper")
    assert set(data) <= {f.name for f in fields(ExperimentConfig)}
    cfg = ExperimentConfig(**data)
    cfg.validate()  # every algorithm and option exists
    assert cfg.partition == "one_label" and cfg.l2_normalize is False
    assert isinstance(paper["source"], str) and isinstance(paper["dataset_note"], str)
    assert cfg.clients_per_round == 159  # the paper's protocol: every one-label client every round
    rows = paper["p_at_1"]
    assert set(rows) <= set(cfg.algorithms) and {"FedAwS", "FedALC"} <= set(rows)
    assert all(0 < v < 100 for v in rows.values())
    assert rows["FedALC"] > rows["FedAwS"] > rows.get("FedAvg-positive", 0.0)


def _write_xc(path: Path) -> None:
    rows = ["4 3 2", "0 0:3 1:4", "1 2:2", "0,1 0:1 2:1", "1 1:5"]
    path.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("l2", [True, False])
def test_l2_normalize_option_reaches_the_features(tmp_path, l2):
    _write_xc(tmp_path / "all.txt")
    cfg = ExperimentConfig(dataset=str(tmp_path), partition="iid", clients=1, clients_per_round=1, test_fraction=0.5)
    cfg.l2_normalize = l2
    cfg.validate()
    data = prepare_data(cfg)
    x = torch.cat([data.dataset.train.x, data.dataset.test.x])
    raw = torch.tensor([[3, 4, 0], [0, 0, 2], [1, 0, 1], [0, 5, 0]], dtype=torch.float32)
    # every stored row is one of the file's rows, raw or unit-norm as asked
    want = torch.nn.functional.normalize(raw, dim=1) if l2 else raw
    for row in x:
        assert any(torch.allclose(row, w) for w in want)
    assert data.dataset.notes["l2_normalize"] is l2
    norms = x.norm(dim=1).numpy()
    assert np.allclose(norms, 1.0) == l2


def test_l2_normalize_must_be_bool():
    with pytest.raises(ValueError, match="l2_normalize"):
        ExperimentConfig(l2_normalize="no").validate()


def test_no_preset_ships_a_client_secret():
    """Issue 41 item 15: the FedAwS/FedALC presets shipped client_secret = "0123456789abcdef"; anyone
    holding the preset (the server included) could map FedALC's opaque label tokens back to label ids
    (all 159 on Bibtex, with its public label statistics). No preset holds one now, and a run built
    from a preset draws a fresh secret from OS randomness each time."""
    from fedkernels.fl.registry import make_strategy

    for path in sorted(PRESETS.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for name, options in data.get("algorithm_options", {}).items():
            assert "client_secret" not in options and "client_secret_file" not in options, (path.name, name)
    data = tomllib.loads((PRESETS / "fedalc-bibtex.toml").read_text())
    options = data["algorithm_options"]["FedALC"]
    a, b = make_strategy("FedALC", **options), make_strategy("FedALC", **options)
    assert a._secret != b._secret
