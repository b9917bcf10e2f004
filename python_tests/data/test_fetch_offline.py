"""`fedkernels data` without a network, and where a dataset is found: every failed download says what to
do instead (``--url file://...``, a folder, ``$FEDKERNELS_DATA_DIR``), no lock file or empty data folder
is left behind, a missing registered dataset is not answered with its own name in another case, and
``data list`` reports the copy ``run --dataset NAME`` reads. No test touches the internet: "offline" is
a monkeypatched ``urlopen`` whose host lookup fails, or a loopback port nothing listens on."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import threading
import time
import urllib.error
from pathlib import Path

import pytest

from fedkernels._suggest import did_you_mean
from fedkernels.data import DownloadError, RemoteDataset, RemoteFile, fetch, resolve_dataset
from fedkernels.data import fetcher as fetcher_mod
from fedkernels.data.locations import MARKER, dataset_status, find_dataset
from fedkernels.data.remote import get_remote, remote_datasets
from fedkernels_cli import main
from python_tests.support.local_ports import free_port

XC_SMALL = "3 4 2\n0 0:1 2:1\n1 1:1\n0,1 3:2\n"
SHA = hashlib.sha256(XC_SMALL.encode()).hexdigest()


@pytest.fixture
def isolated(tmp_path, monkeypatch) -> Path:
    """A data folder that does not exist yet, run from a folder with no ``data/`` or ``../shared/data``."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    root = tmp_path / "dd"
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(root))
    return root


@pytest.fixture
def offline(monkeypatch):
    """Every download fails as it does without a network: the host name lookup."""

    def urlopen(url, *args, **kwargs):
        if str(url).startswith("file:"):
            return real(url, *args, **kwargs)
        raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))

    real = fetcher_mod.urllib.request.urlopen
    monkeypatch.setattr(fetcher_mod.urllib.request, "urlopen", urlopen)


def _left_in(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_offline_get_bibtex_says_what_to_do_and_leaves_nothing(isolated, offline, capsys):
    assert main(["data", "get", "Bibtex", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "host name lookup failed" in err and "are you offline? To get it without this network:" in err
    bibtex = get_remote("Bibtex")
    for f in bibtex.files:  # what to download, and how to hand it over
        assert f.url in err and f.name in err
    assert "`fedkernels data get Bibtex --url file:///path/to/that/folder/`" in err
    assert "FEDKERNELS_DATA_DIR" in err and str(isolated / "Bibtex") in err
    assert not isolated.exists()  # the data folder this get made is gone again, lock file and all
    assert "A copy is already at" not in err


def test_offline_get_says_where_a_run_already_finds_a_copy(isolated, offline, capsys):
    mine = _hand_copy(isolated, "bibtex")
    assert main(["data", "get", "Bibtex", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"A copy is already at {mine}, which `fedkernels run --dataset Bibtex` reads as it is." in err
    assert sorted(p.name for p in isolated.iterdir()) == ["bibtex"]  # an existing data folder keeps only that


def test_every_network_failure_carries_the_advice_and_no_lock_stays(isolated, registered, tmp_path):
    isolated.mkdir()
    (isolated / "other.txt").write_text("keep me")
    registered(
        RemoteDataset(
            "refused-one",
            (RemoteFile(f"http://127.0.0.1:{free_port()}/one.zip", "one.zip", None, "zip"),),
            "x_train.txt",
            "x_test.txt",
        )
    )
    with pytest.raises(DownloadError) as info:
        fetch("refused-one", progress=False)
    msg = str(info.value)
    assert "connection refused" in msg
    assert "`fedkernels data get refused-one --url file:///path/to/one.zip`" in msg
    assert _left_in(isolated) == ["other.txt"]  # an existing data folder stays, with nothing added


def test_no_lock_file_after_success_or_any_failure(isolated, registered, tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "tr.txt").write_text(XC_SMALL)
    (site / "te.txt").write_text(XC_SMALL)
    registered(
        RemoteDataset(
            "locky",
            (RemoteFile(None, "tr.txt", SHA), RemoteFile(None, "te.txt", SHA)),
            "tr.txt",
            "te.txt",
        )
    )
    url = site.as_uri() + "/"
    folder = fetch("locky", url=url, progress=False)
    assert _left_in(isolated) == ["locky"] and (folder / MARKER).is_file()
    # a checksum mismatch, a missing file, and an interrupt in the middle: none leaves a lock or staging
    (site / "te.txt").write_text(XC_SMALL + "1 0:1\n")
    with pytest.raises(DownloadError, match="checksum mismatch"):
        fetch("locky", url=url, force=True, progress=False)
    (site / "te.txt").unlink()
    with pytest.raises(DownloadError, match="no such file"):
        fetch("locky", url=url, force=True, progress=False)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(fetcher_mod, "_fill", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch("locky", url=url, force=True, progress=False)
    assert _left_in(isolated) == ["locky"] and (isolated / "locky" / "train.txt").read_text() == XC_SMALL


def test_url_may_name_a_folder_holding_every_file_of_a_dataset(isolated, registered, tmp_path):
    site = tmp_path / "downloads"
    site.mkdir()
    (site / "pair-train.txt").write_text(XC_SMALL)
    (site / "pair-test.txt").write_text(XC_SMALL)
    registered(
        RemoteDataset(
            "pair",
            (
                RemoteFile(f"http://127.0.0.1:{free_port()}/pair-train.txt", "pair-train.txt", SHA),
                RemoteFile(f"http://127.0.0.1:{free_port()}/pair-test.txt", "pair-test.txt", SHA),
            ),
            "pair-train.txt",
            "pair-test.txt",
        )
    )
    with pytest.raises(ValueError, match=r"published as 2 files \(pair-train\.txt, pair-test\.txt\): pass --url a"):
        fetch("pair", url=(site / "pair-train.txt").as_uri(), progress=False)
    folder = fetch("pair", url=site.as_uri(), progress=False)  # a file:// folder, with or without the slash
    assert (folder / "test.txt").read_text() == XC_SMALL
    assert json.loads((folder / MARKER).read_text())["urls"] == [
        site.as_uri() + "/pair-train.txt",
        site.as_uri() + "/pair-test.txt",
    ]


def test_the_lock_excludes_a_waiter_and_a_newcomer_while_its_file_is_deleted(tmp_path):
    """The holder deletes the lock file on leaving; a get that waited on the deleted file must not run
    beside one that created the next file."""
    inside, most, errors = [0], [0], []
    guard = threading.Lock()

    def hold(seconds: float) -> None:
        try:
            with fetcher_mod._dataset_lock(tmp_path, "x", log=io.StringIO()):
                with guard:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(seconds)
                with guard:
                    inside[0] -= 1
        except Exception as e:  # collected: the test fails on any
            errors.append(e)

    threads = []
    for start, seconds in ((0.0, 0.3), (0.1, 0.2), (0.3, 0.2), (0.32, 0.1), (0.35, 0.1)):
        t = threading.Thread(target=hold, args=(seconds,))
        threads.append((start, t))
    t0 = time.monotonic()
    for start, t in threads:
        time.sleep(max(0.0, t0 + start - time.monotonic()))
        t.start()
    for _, t in threads:
        t.join(10)
    assert not errors and most[0] == 1
    assert not (tmp_path / ".x.lock").exists()


def test_did_you_mean_skips_what_a_case_blind_lookup_tried():
    assert did_you_mean("bibtex", ["Bibtex", "Delicious"]) == " (did you mean 'Bibtex'?)"
    assert did_you_mean("bibtex", ["Bibtex", "Delicious"], exclude=["BIBTEX"]) == ""
    assert did_you_mean("bibtx", ["Bibtex", "bibtex-2"], exclude=["bibtex"]) == " (did you mean 'bibtex-2'?)"


@pytest.mark.parametrize("typed", ["bibtex", "BIBTEX", "Bibtex"])
def test_a_missing_registered_dataset_says_how_to_get_it_not_its_own_name(isolated, capsys, tmp_path, typed):
    out = tmp_path / "o"
    assert main(["run", "--dataset", typed, "--no-progress", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"dataset {typed!r} not found" in err
    assert "did you mean" not in err
    assert (
        f"Bibtex is a registered dataset, not downloaded yet: `fedkernels data get Bibtex` downloads it into {isolated}"
        in err
    )


def test_the_get_command_offered_honours_data_dir(isolated, capsys, tmp_path):
    mine = tmp_path / "mine"
    assert main(["run", "--dataset", "bibtex", "--data-dir", str(mine), "--output", str(tmp_path / "o")]) == 2
    assert f"`fedkernels data get Bibtex --data-dir {mine}` downloads it into {mine}" in capsys.readouterr().err


def test_eurlex_alias_is_not_suggested_for_itself(isolated, capsys, tmp_path):
    assert main(["run", "--dataset", "eurlex", "--no-progress", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "did you mean" not in err and "`fedkernels data get EURLex-4K`" in err


def _hand_copy(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "train.txt").write_text(XC_SMALL)
    (folder / "test.txt").write_text(XC_SMALL)
    return folder


def _list_status(capsys, *args: str) -> dict[str, str]:
    assert main(["data", "list", *args]) == 0
    out = capsys.readouterr().out
    rows = {}
    for ds in remote_datasets():
        line = next(line for line in out.splitlines() if line.startswith(ds.name + " "))
        rows[ds.name] = line.split("  ")[-1].strip()
    return rows


def test_data_list_reports_the_copy_run_reads(isolated, capsys, tmp_path):
    """With $FEDKERNELS_DATA_DIR holding a hand-made ``bibtex`` (lower case, no `data get` marker), `data
    list` says where Bibtex is found, and it is the folder `run --dataset Bibtex` resolves to."""
    mine = _hand_copy(isolated, "bibtex")
    rows = _list_status(capsys)
    assert rows["Bibtex"] == f"found: {mine}"
    assert rows["Delicious"] == "not downloaded" and rows["Mediamill"] == "manual download"
    for ds in remote_datasets():  # one view: data list's answer is where run looks
        found = find_dataset(ds.name)
        try:
            path = resolve_dataset(ds.name)
        except FileNotFoundError:
            path = None
        assert (found.path if found else None) == path, ds.name
        assert rows[ds.name].startswith(("found", "downloaded")) == (path is not None), ds.name
    assert main(["data", "info", "bibtex"]) == 0
    assert f"status: found: {mine}" in capsys.readouterr().out
    assert main(["data", "verify", "bibtex"]) == 1  # nothing to check it against, said so
    assert f"placed by hand, no checksums recorded to check: {mine}" in capsys.readouterr().out


def test_a_fetched_copy_is_downloaded_and_another_folder_first_wins(isolated, capsys, tmp_path):
    fetched = _hand_copy(isolated, "Delicious")
    (fetched / MARKER).write_text(json.dumps({"files": {}}))
    assert dataset_status("Delicious") == "downloaded"
    assert _list_status(capsys)["Delicious"] == "downloaded"
    # --data-dir comes first for both run and list
    other = _hand_copy(tmp_path / "mine", "DELICIOUS")
    assert _list_status(capsys, "--data-dir", str(tmp_path / "mine"))["Delicious"] == f"found: {other}"
    assert resolve_dataset("delicious", tmp_path / "mine") == other
    # a fetched copy outside the folder `get` writes to says where it is
    assert dataset_status("Delicious", tmp_path / "elsewhere") == f"downloaded: {fetched}"
