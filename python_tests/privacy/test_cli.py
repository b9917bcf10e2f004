"""`fedkernels run` privacy flags: validated before any data is read; a tiny private run reports epsilon."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

from fedkernels_cli import main

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
        (["--dp-mechanism", "tree"], "needs dp_clip"),
        (["--dp-clip", "1", "--dp-noise", "1", "--dp-mechanism", "shuffle"], "must be 'poisson' or 'tree'"),
        (["--dp-seeded"], "dp_seeded applies to runs with DP"),
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
    # 40 clients, 20 a round: a Poisson round too small for SecAgg+ is improbable enough (see
    # test_claims_accounting: such rounds spend delta)
    argv = ["run", "--algorithms", "FedAvg", "--rounds", "2", "--clients", "40", "--clients-per-round", "20"]
    argv += ["--local-epochs", "1", "--output", str(out), "--no-progress", "--secagg"]
    argv += ["--dp-clip", "0.5", "--dp-noise", "1.0", "--threads", "1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "client-level DP after 2 rounds" in text and "against the server" in text
    assert "ε" in next(line for line in text.splitlines() if line.startswith("algorithm "))  # kept at any width
    hist = json.loads((out / "results.json").read_text())["results"][0]["history"]
    assert [h["privacy"]["epsilon"] > 0 for h in hist] == [True, True]
    assert hist[1]["privacy"]["epsilon"] > hist[0]["privacy"]["epsilon"]
    # the server knows the sample: no amplification, so its epsilon is never below the observers'
    assert all(h["privacy"]["epsilon_server"] >= h["privacy"]["epsilon"] for h in hist)
    # the sample is secret: the written rounds name no client and count none
    assert all(h["clients"] == [] and h["contributed"] == [] and "survivors" not in h["privacy"] for h in hist)
    assert all(h["bytes_up"] == 0 == h["bytes_down"] for h in hist)


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


def _tiny_run(tmp_path, name, *flags):
    out = tmp_path / name
    argv = ["run", "--algorithms", "FedAvg", "--rounds", "2", "--clients", "6", "--clients-per-round", "3"]
    argv += ["--local-epochs", "1", "--output", str(out), "--no-progress", "--threads", "1", *flags]
    assert main(argv) == 0
    return json.loads((out / "results.json").read_text())["results"][0]


def test_dp_seeded_runs_reproduce_and_say_they_are_simulations(tmp_path, capsys):
    flags = ["--dp-clip", "0.5", "--dp-noise", "1.0", "--dp-seeded"]
    a, b = _tiny_run(tmp_path, "a", *flags), _tiny_run(tmp_path, "b", *flags)
    assert a["final"] == b["final"] and a["privacy"]["epsilon"] == b["privacy"]["epsilon"]
    assert a["privacy"]["seeded"] == 1.0 and "seeded simulation" in capsys.readouterr().out


def test_dp_ftrl_from_the_cli_reports_its_tree_epsilon(tmp_path):
    got = _tiny_run(tmp_path, "t", "--dp-clip", "0.5", "--dp-noise", "1.0", "--dp-mechanism", "tree")
    hist = got["history"]
    assert [h["privacy"]["tree"] for h in hist] == [0.0, 0.0]  # 6 clients, 3 a round: 2 rounds a tree
    assert all(h["clients"] for h in hist)  # participation is public under DP-FTRL
    assert got["privacy"]["epsilon"] > 0 and got["privacy"]["epsilon_server"] == float("inf")
