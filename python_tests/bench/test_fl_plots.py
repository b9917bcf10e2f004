"""bench/fl/fl_plots.py: each sweep JSON becomes a PNG beside ``--out``; a missing or incomplete JSON is
skipped with its reason; the regulariser sweep's late mean is the second half's evaluations."""

from __future__ import annotations

import json

import pytest

from python_tests.support.paths import ROOT
from python_tests.support.scripts import load_script

pytest.importorskip("matplotlib")
BENCH = ROOT / "bench"


@pytest.fixture
def fl_plots():
    return load_script(BENCH / "fl" / "fl_plots.py")  # with the bench/common.py it imports


def _row(**kw):
    return {"P@1": 0.5, "MB_up": 1.0, "MB_down": 2.0, **kw}


def test_each_sweep_json_becomes_a_png_and_incomplete_ones_are_skipped(fl_plots, tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    sampled = [
        _row(algorithm="FedSS", m=16),
        _row(algorithm="FedSS", m=64),
        _row(algorithm="FedSS-FullSoftmax", m=None),
    ]
    (res / "fl_sampled.json").write_text(json.dumps({"rows": sampled, "dataset": "d", "args": {"rounds": 2}}))
    partial = [_row(algorithm="FedAvg", beta=0.5, p=None), _row(algorithm="PartialExchange", beta=0.5, p=0.25)]
    (res / "fl_partial.json").write_text(json.dumps({"rows": partial, "dataset": "d", "args": {}}))
    (res / "fl_l1diff.json").write_text(json.dumps({"rows": [{"strategy": "L1Diff", "P@1": 0.1}]}))  # no MB
    curve = [[10, 0.1, 5.0], [20, 0.3, 10.0], [30, 0.2, 15.0], [40, 0.4, 20.0]]
    sweep = [
        {"algorithm": a, "reg_weight": w, "P@1": 0.4, "MB_up": 10.0, "MB_down": 10.0, "curve": curve}
        for a in ("FedAwS", "FedALC")
        for w in (1, 10)
    ]
    (res / "fl_fedaws_sweep.json").write_text(json.dumps({"rows": sweep, "args": {"rounds": 40, "seeds": [0]}}))
    out = tmp_path / "out" / "index.json"
    assert fl_plots.main(["--results", str(res), "--out", str(out)]) == 0
    index = json.loads(out.read_text())
    assert set(index["plots"]) == {"fl_sampled", "fl_partial", "fl_fedaws_sweep"}
    assert "MB_down" in index["skipped"]["fl_l1diff"]
    for png in index["plots"].values():
        assert (out.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_late_mean_is_the_second_half(fl_plots):
    curve = [[10, 0.1, 1.0], [20, 0.3, 2.0], [30, 0.2, 3.0], [40, 0.4, 4.0]]
    assert fl_plots.late_mean(curve) == pytest.approx(0.3)  # rounds 30 and 40
