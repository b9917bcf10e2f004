"""Privacy claim: a DP run releases nothing outside its accountant. FedALC and FedALC-fixed release
statistics of the clients' labels at setup (co-occurrence counts; FedALC-fixed's class embeddings,
learned from them, move by up to 0.56 when one client's data changes) with no noise, so with client-level
or sample-level DP they are refused before any data is read (the review's case 7); without DP, and under
secure aggregation alone (which claims nothing about setup), they run."""

from __future__ import annotations

import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

from fedkernels.fl import RunConfig, TrainConfig
from fedkernels.fl.privacy import DPConfig, PrivacyConfig, PrivateServer
from fedkernels_cli import main
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, make_strategy


@pytest.mark.parametrize("name", ["fedalc", "fedalc-fixed"])
def test_fedalc_setup_statistics_are_refused_under_client_dp(name):
    clients = [client_data(i, 5, name) for i in range(5)]
    cfg = RunConfig(rounds=1, clients_per_round=4, train=TrainConfig(epochs=1))
    with pytest.raises(ValueError, match="setup releases statistics"):
        PrivateServer(
            make_strategy(name), clients, NUM_FEATURES, NUM_CLASSES, cfg, PrivacyConfig(dp=DPConfig(1.0, noise=1.0))
        )
    PrivateServer(make_strategy(name), clients, NUM_FEATURES, NUM_CLASSES, cfg, PrivacyConfig(secagg=True))


@pytest.mark.parametrize(
    "flags",
    [["--dp-clip", "1", "--dp-noise", "1"], ["--dp-sample-clip", "1", "--dp-sample-noise", "1"]],
    ids=["client-level", "dp-sgd"],
)
def test_the_cli_refuses_fedalc_with_dp_before_reading_data(flags, capsys):
    argv = ["run", "--dataset", "/nonexistent/never/read", "--no-progress", "--algorithms", "FedALC", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "setup releases statistics" in err and "nonexistent" not in err
