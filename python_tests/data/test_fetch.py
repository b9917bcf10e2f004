"""`fedkernels data`: the registry, the fetcher against a loopback HTTP server (127.0.0.1 only), every
network failure as a clear DownloadError, the cache, and `--dataset NAME` in `fedkernels run`."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import threading
import zipfile
from pathlib import Path

import pytest

from fedkernels.data import (
    DownloadError,
    RemoteDataset,
    RemoteFile,
    cache_dir,
    fetch,
    get_remote,
    is_fetched,
    load_dataset,
    remote_datasets,
)
from fedkernels.data.fetcher import MARKER, download
from fedkernels_cli import main
from python_tests.support.local_ports import free_port
from python_tests.support.xc_folder import write_xc_folder

XC_SMALL = "3 4 2\n0 0:1 2:1\n1 1:1\n0,1 3:2\n"


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; ``/truncated/<n>`` promises n bytes and sends half; ``/page`` is an HTML page."""

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/truncated/"):
            n = int(self.path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.write(b"x" * (n // 2))
            self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/page":
            body = b"<html>confirm download?</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()


@pytest.fixture
def serve():
    """``serve(folder) -> base URL`` of a threaded HTTP server on 127.0.0.1 (stopped after the test)."""
    servers = []

    def start(folder: Path) -> str:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(root))
    return root


def test_registry_lists_the_papers_datasets():
    names = {d.name for d in remote_datasets()}
    for want in ("Bibtex", "Delicious", "EURLex-4K", "Wiki10-31K", "AmazonCat-13K", "Amazon-670K", "WikiLSHTC-325K"):
        assert want in names
    eurlex = get_remote("eurlex")  # alias, any case
    assert eurlex.name == "EURLex-4K" and eurlex.files[0].url.startswith("https://drive.google.com/")
    assert (eurlex.num_features, eurlex.num_labels, eurlex.num_train, eurlex.num_test) == (5000, 3993, 15539, 3809)
    for d in remote_datasets():  # a checksum only where computed from the file itself (never invented)
        for f in d.files:
            pinned = f.url is not None and "/tsoumakas/mulan/43f6389095ad71984264db4387a8074b22bc7d4a/" in f.url
            assert (f.sha256 is not None) == pinned, (d.name, f.name)
    with pytest.raises(ValueError, match="unknown dataset 'nope'; known: Mediamill"):
        get_remote("nope")


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("FEDKERNELS_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "fedkernels" / "data"


def test_get_xc_from_loopback_and_run_it(serve, cache, registered, capsys, tmp_path):
    site = tmp_path / "site"
    source = write_xc_folder(site / "xc", num_train=300, num_test=100, num_features=256, num_labels=30)
    base = serve(site)
    sha = hashlib.sha256((source / "train.txt").read_bytes()).hexdigest()
    registered(
        RemoteDataset(
            "xc-loopback",
            (RemoteFile(f"{base}/xc/train.txt", "tr.txt", sha), RemoteFile(f"{base}/xc/test.txt", "te.txt")),
            "tr.txt",
            "te.txt",
            "xc",
            256,
            30,
            300,
            100,
        )
    )
    assert main(["data", "get", "xc-loopback", "--no-progress"]) == 0
    out = capsys.readouterr().out
    te_sha = hashlib.sha256((source / "test.txt").read_bytes()).hexdigest()
    assert f"te.txt: SHA-256 {te_sha} (no checksum recorded" in out  # printed, not invented
    assert "tr.txt: SHA-256" not in out  # recorded, so verified silently
    folder = cache / "xc-loopback"
    assert (folder / "train.txt").read_bytes() == (source / "train.txt").read_bytes()
    assert (folder / MARKER).is_file() and is_fetched("XC-loopback")
    ds = load_dataset("xc-loopback")
    assert (len(ds.train), len(ds.test), ds.num_features, ds.num_classes) == (300, 100, 256, 30)
    assert main(["data", "list"]) == 0 and "xc-loopback" in capsys.readouterr().out
    # `fedkernels run --dataset NAME` reads it from the cache
    assert (
        main(
            [
                "run",
                "--dataset",
                "xc-loopback",
                "--rounds",
                "1",
                "--clients",
                "2",
                "--clients-per-round",
                "1",
                "--algorithms",
                "FedAvg",
                "--option",
                "FedAvg.hidden=[8]",
                "--no-progress",
                "--max-test",
                "200",
                "--output",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    assert "dataset " in capsys.readouterr().out


def test_zip_archive_is_unpacked_and_placed(serve, cache, registered, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("Small/small_train.txt", XC_SMALL)
        z.writestr("Small/small_test.txt", XC_SMALL)
    (site / "Small.zip").write_bytes(buf.getvalue())
    sha = hashlib.sha256(buf.getvalue()).hexdigest()
    registered(
        RemoteDataset(
            "small-zip",
            (RemoteFile(serve(site) + "/Small.zip", "Small.zip", sha, "zip"),),
            "Small/small_train.txt",
            "Small/small_test.txt",
        )
    )
    folder = fetch("small-zip", progress=False)
    assert (folder / "train.txt").read_text() == XC_SMALL and not (folder / "Small.zip").exists()
    ds = load_dataset("small-zip")
    assert (len(ds.train), ds.num_features, ds.num_classes) == (3, 4, 2)
    # a manual download: --url file:///... (checked against the recorded checksum all the same)
    assert main(["data", "get", "small-zip", "--force", "--no-progress", "--url", (site / "Small.zip").as_uri()]) == 0
    assert (folder / "test.txt").read_text() == XC_SMALL
    (site / "Small.zip").write_bytes(b"not a zip at all")
    with pytest.raises(DownloadError, match="checksum mismatch"):
        fetch("small-zip", force=True, progress=False)


def test_not_downloaded_and_manual_entries_are_clear(cache, capsys):
    with pytest.raises(FileNotFoundError, match="EURLex-4K is a registered dataset, not downloaded yet: `fedkernels"):
        load_dataset("eurlex-4k")
    assert main(["data", "get", "mediamill"]) == 2
    assert "no direct download link recorded" in capsys.readouterr().err
    assert main(["data", "info", "Amazon-670K"]) == 0
    out = capsys.readouterr().out
    assert "sha256: not recorded" in out and "drive.google.com" in out and "not downloaded" in out


def test_connection_refused(cache, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/bibtex/train.txt"
    with pytest.raises(DownloadError, match="connection refused"):
        download(url, tmp_path / "f.txt", progress=False)
    assert not list(tmp_path.glob("f.txt*"))


def test_http_404(serve, tmp_path):
    base = serve(tmp_path)
    with pytest.raises(DownloadError, match=r"HTTP 404 .* for http://127\.0\.0\.1:\d+/missing\.txt"):
        download(f"{base}/missing.txt", tmp_path / "f.txt", progress=False)


def test_truncated_download(serve, tmp_path):
    base = serve(tmp_path)
    with pytest.raises(DownloadError, match=r"truncated download .* (got 500 of 1000 bytes|after 500 bytes)"):
        download(f"{base}/truncated/1000", tmp_path / "f.txt", progress=False)
    assert not list(tmp_path.glob("f.txt*"))  # neither the file nor its .part is left


def test_checksum_mismatch(serve, tmp_path):
    (tmp_path / "data.txt").write_text(XC_SMALL)
    base = serve(tmp_path)
    with pytest.raises(DownloadError, match=r"checksum mismatch .* expected SHA-256 0{64}, got [0-9a-f]{64}"):
        download(f"{base}/data.txt", tmp_path / "out.txt", sha256="0" * 64, progress=False)
    assert not (tmp_path / "out.txt").exists()
    good = hashlib.sha256(XC_SMALL.encode()).hexdigest()
    assert download(f"{base}/data.txt", tmp_path / "out.txt", sha256=good, progress=False) == good


def test_html_page_instead_of_file(serve, tmp_path):
    with pytest.raises(DownloadError, match="HTML page, not the file"):
        download(serve(tmp_path) + "/page", tmp_path / "f.zip", progress=False)


def test_cli_reports_network_errors(cache, registered, capsys):
    registered(
        RemoteDataset(
            "refused",
            (
                RemoteFile(f"http://127.0.0.1:{free_port()}/x.txt", "x.txt"),
                RemoteFile(f"http://127.0.0.1:{free_port()}/y.txt", "y.txt"),
            ),
            "x.txt",
            "y.txt",
        )
    )
    assert main(["data", "get", "refused", "--no-progress"]) == 2
    assert "connection refused" in capsys.readouterr().err
    assert not is_fetched("refused") and not (cache / "refused").exists()  # nothing half-fetched is kept


def test_bad_archive_without_checksum(serve, cache, registered, tmp_path):
    (tmp_path / "Bad.zip").write_bytes(b"PK but not really a zip")
    registered(
        RemoteDataset(
            "bad-zip", (RemoteFile(serve(tmp_path) + "/Bad.zip", "Bad.zip", None, "zip"),), "a_train.txt", "a_test.txt"
        )
    )
    with pytest.raises(DownloadError, match=r"Bad\.zip is not a valid zip archive"):
        fetch("bad-zip", progress=False)
    assert not (cache / "bad-zip").exists()


def test_small_xc_dataset_split_from_manual_zip(cache, capsys, tmp_path):
    """Mediamill as the XC repository ships it (one _data.txt + split files, 1-based rows, a column per
    split), fetched with --url file://: train.txt/test.txt are cut by the first split."""
    data = "5 4 3\n0 0:1\n1 1:1\n2 2:1\n0,2 3:0.5\n 0:2\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("Mediamill/Mediamill_data.txt", data)
        z.writestr("Mediamill/mediamill_trSplit.txt", "1 2\n3 3\n5 4\n")
        z.writestr("Mediamill/mediamill_tstSplit.txt", "2 1\n4 5\n")
    (tmp_path / "Mediamill.zip").write_bytes(buf.getvalue())
    url = (tmp_path / "Mediamill.zip").as_uri()
    assert main(["data", "get", "Mediamill", "--no-progress", "--url", url]) == 0
    assert "Mediamill.zip: SHA-256 " in capsys.readouterr().out
    lines = data.splitlines()
    train = (cache / "Mediamill" / "train.txt").read_text()
    assert train.splitlines() == ["3 4 3", lines[1], lines[3], lines[5]]
    assert (cache / "Mediamill" / "test.txt").read_text().splitlines() == ["2 4 3", lines[2], lines[4]]
    ds = load_dataset("mediamill")
    assert (len(ds.train), len(ds.test), ds.num_classes) == (3, 2, 3)
    with zipfile.ZipFile(tmp_path / "Mediamill.zip", "w") as z:
        z.writestr("Mediamill/Mediamill_data.txt", data)
        z.writestr("Mediamill/mediamill_trSplit.txt", "1\n9\n")
        z.writestr("Mediamill/mediamill_tstSplit.txt", "2\n")
    assert main(["data", "get", "Mediamill", "--force", "--no-progress", "--url", url]) == 2
    err = capsys.readouterr().err
    # the first download was trusted: a changed file is refused on its checksum, and the good copy stays
    assert "trusted on first use" in err
    assert is_fetched("Mediamill") and (cache / "Mediamill" / "train.txt").read_text() == train
    # in a fresh data folder nothing was trusted yet: the bad split itself is reported
    other = tmp_path / "other-data"
    assert main(["data", "get", "Mediamill", "--no-progress", "--url", url, "--data-dir", str(other)]) == 2
    assert "names rows outside 1..5" in capsys.readouterr().err and not is_fetched("Mediamill", other)
