"""A typo in a name (algorithm, preset, dataset, option) is answered with the closest known names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedkernels._suggest import did_you_mean
from fedkernels_cli import main


def test_nothing_close_suggests_nothing():
    assert did_you_mean("zzzzqqq", ["FedAvg", "FedMLH"]) == ""
    assert did_you_mean("x", []) == ""


@given(
    st.lists(st.text("abcdefgh-", min_size=3, max_size=12), min_size=1, max_size=8, unique_by=str.lower),
    st.data(),
)
def test_a_known_name_in_another_case_is_the_first_suggestion(choices, data):
    pick = data.draw(st.sampled_from(choices))
    hint = did_you_mean(pick.upper(), choices)
    assert hint.startswith(f" (did you mean {pick!r}")  # shown as registered, not as typed


@pytest.mark.parametrize(
    "argv, wanted",
    [
        (["run", "--algorithms", "fedmlhh"], "did you mean 'FedMLH'"),
        (["run", "--preset", "fedmlh-bibtx"], "did you mean 'fedmlh-bibtex'"),
        (["run", "--algorithms", "FedMLH", "--option", "FedMLH.num_bucket=3"], "did you mean 'num_buckets'"),
    ],
)
def test_cli_typos_get_a_suggestion(argv, wanted, capsys, tmp_path):
    assert main([*argv, "--output", str(tmp_path / "o")]) == 2
    assert wanted in capsys.readouterr().err


def test_a_mistyped_dataset_name_suggests_the_folder_beside_it(tmp_path, capsys):
    (tmp_path / "bibtex").mkdir()
    assert main(["run", "--dataset", "bibtx", "--data-dir", str(tmp_path), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not found, looked in" in err and "did you mean 'bibtex'" in err
