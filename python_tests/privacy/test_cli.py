"""`fedkernels run` privacy flags: validated before any data is read; a tiny private run reports epsilon."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

from fedkernels.cli import main

MISSING = "/nonexistent/dataset/never/read"


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--dp-noise", "1.0"], "need dp_clip"),
        (["--dp-clip", "1.0"], "exactly one of dp_noise"),
        (["--dp-clip", "1.0", "--dp-noise", "1", "--target-epsilon", "3"], "exactly one of dp_noise"),
        (["--dp-clip", "-1", "--dp-noise", "1"], "dp_clip must be a finite number in (0, "),
        (["--dp-clip", "1", "--dp-noise", "1", "--dp-delta", "1.5"], "dp_delta must be a finite number in (0, 1)"),
        (["--secagg", "--secagg-bits", "70"], "secagg_bits must be an integer in"),
        (["--secagg", "--algorithms", "L1DiffNetwork", "--option", "L1DiffNetwork.num_clients=10"], "personal head"),
        (["--dp-clip", "nan", "--dp-noise", "1"], "dp_clip must be a finite number"),
        (["--dp-clip", "1", "--dp-noise", "1e155"], "dp_noise must be a finite number in [0, 10000]"),
        (["--dp-clip", "1", "--target-epsilon", "1e7"], "target_epsilon must be a finite number in (0, 1000]"),
        (["--dp-clip", "1", "--target-epsilon", "-3"], "target_epsilon must be a finite number"),
        (["--dp-sample-clip", "inf"], "dp_sample_clip must be a finite number"),
        (["--dp-sample-noise", "1"], "needs dp_sample_clip"),
        (["--algorithms", "L1Diff", "--l1diff-segments", "3"], "applies to private rounds"),
        (["--secagg", "--l1diff-segments", "3"], "applies to L1Diff, which the run does not have"),
        (["--secagg", "--algorithms", "L1Diff", "--l1diff-segments", "-1"], "must be an integer >= 0"),
        (
            ["--dp-clip", "1", "--dp-noise", "1", "--algorithms", "L1Diff", "--option", "L1Diff.gamma_rel=0.3"],
            "gamma_rel",
        ),
        # issue 41 item 14: SecAgg+ settings that cannot be secure and correct for the round's clients
        # (before, every round was skipped and the run exited 0 with the untrained model's metrics)
        (["--secagg", "--secagg-degree", "3", "--clients-per-round", "10"], "degree must be even"),
        (["--secagg", "--secagg-dropouts", "50", "--clients-per-round", "10"], "max_dropouts 50"),
        (["--secagg", "--secagg-corrupt-fraction", "0.5", "--clients-per-round", "10"], "no SecAgg+ graph"),
        (["--secagg", "--secagg-dropout-fraction", "1"], "secagg_dropout_fraction must be a finite number in [0, 1)"),
        (["--secagg", "--secagg-weight-cap", "0"], "secagg_weight_cap must be a finite number in [1, "),
        (["--secagg", "--secagg-bits", "8", "--clients", "40", "--clients-per-round", "40"], "cannot hold the sum"),
    ],
)
def test_bad_privacy_flags_fail_before_the_data_is_read(flags, message, capsys):
    assert main(["run", "--dataset", MISSING, "--no-progress", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "nonexistent" not in err


def test_tiny_private_run_reports_epsilon_every_round(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["run", "--algorithms", "FedAvg", "--rounds", "2", "--clients", "6", "--clients-per-round", "4"]
    argv += ["--local-epochs", "1", "--output", str(out), "--no-progress", "--secagg"]
    argv += ["--dp-clip", "0.5", "--dp-noise", "1.0", "--threads", "1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "client-level (ε = " in text and "| ε |" in text
    hist = json.loads((out / "results.json").read_text())["results"][0]["history"]
    assert [h["privacy"]["epsilon"] > 0 for h in hist] == [True, True]
    assert hist[1]["privacy"]["epsilon"] > hist[0]["privacy"]["epsilon"]


def test_l1diff_public_segments_from_the_cli_shrink_the_segmented_rounds_uploads(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["run", "--algorithms", "L1Diff", "--rounds", "3", "--clients", "6", "--clients-per-round", "4"]
    argv += ["--option", "L1Diff.gamma=0.05", "--output", str(out), "--no-progress", "--threads", "1"]
    argv += ["--secagg", "--l1diff-segments", "3", "--eval-every", "3"]
    assert main(argv) == 0
    run = json.loads((out / "results.json").read_text())
    hist = run["results"][0]["history"]
    up = [h["bytes_up"] for h in hist]
    assert up[1] < up[0] / 2 and up[2] < up[0] / 2  # one masked value per segment, not per weight
    assert run["config"]["l1diff_segments"] == 3
