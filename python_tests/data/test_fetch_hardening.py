"""`fedkernels data get` against hostile or failing sources (second hostile sweep), on a loopback HTTP
server and file:// URLs only: a size bound per dataset (announced and streamed: an endless body
stops), a ratio bound on archives (a small zip of a large file), ``--force`` that keeps the cached
copy until the new one verified, one lock per dataset, trust on first use where no checksum is
recorded, ``data verify``; and the data folder: one environment variable, bare names everywhere
(presets included, honouring --data-dir), and "not found, looked in ..." for a missing dataset."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import threading
import time
import zipfile
from pathlib import Path

import pytest

from fedkernels.data import (
    DownloadError,
    RemoteDataset,
    RemoteFile,
    fetch,
    is_fetched,
    load_dataset,
)
from fedkernels.data.fetcher import MARKER, TRUST, cache_dir
from fedkernels.data.remote import get_remote
from fedkernels_cli import main, parser
from fedkernels_cli.config import build_config
from python_tests.support.real_data import dataset

BIBTEX = dataset("bibtex")
XC_SMALL = "3 4 2\n0 0:1 2:1\n1 1:1\n0,1 3:2\n"


ENDLESS_BYTES = 64 << 20  # what /endless sends a client that never stops reading


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; ``/endless`` streams zeros without a length (up to :data:`ENDLESS_BYTES`),
    counting in the server's ``sent`` every byte it hands to the socket; ``/slow/<f>`` waits a
    second first; every GET is counted in the server's ``hits``."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/endless":
            self.send_response(200)
            self.end_headers()
            block = bytes(1 << 16)
            try:
                for _ in range(ENDLESS_BYTES // len(block)):
                    self.server.sent += len(block)  # type: ignore[attr-defined]  # counted before: one in flight too
                    self.wfile.write(block)
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.close_connection = True
            return
        if self.path.startswith("/slow/"):
            time.sleep(1.0)
            self.path = self.path[len("/slow") :]
        super().do_GET()


@pytest.fixture
def serve():
    servers = []

    def start(folder: Path):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        srv.hits = []  # type: ignore[attr-defined]
        srv.sent = 0  # type: ignore[attr-defined]
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}", srv

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(root))
    monkeypatch.delenv("FEDKERNELS_DATA", raising=False)
    return root


def _site(tmp_path) -> Path:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "tr.txt").write_text(XC_SMALL)
    (site / "te.txt").write_text(XC_SMALL)
    return site


def _pair(name: str, base: str, sha: str | None = None, **kw) -> RemoteDataset:
    return RemoteDataset(
        name,
        (RemoteFile(f"{base}/tr.txt", "tr.txt", sha), RemoteFile(f"{base}/te.txt", "te.txt", sha)),
        "tr.txt",
        "te.txt",
        **kw,
    )


def test_download_over_the_dataset_size_bound_is_refused_before_reading(tmp_path, cache, serve, registered):
    site = _site(tmp_path)
    (site / "tr.txt").write_text(XC_SMALL * 200)  # about 5 KB
    base, _ = serve(site)
    registered(_pair("bounded", base, max_bytes=1000))
    with pytest.raises(DownloadError, match=r"announces \d+ bytes, more than the 1000"):
        fetch("bounded", progress=False)
    assert not (cache / "bounded").exists()


def test_endless_body_stops_at_the_bound(tmp_path, cache, serve, registered):
    base, srv = serve(_site(tmp_path))
    registered(
        RemoteDataset(
            "endless",
            (RemoteFile(f"{base}/endless", "e.txt"), RemoteFile(f"{base}/te.txt", "te.txt")),
            "e.txt",
            "te.txt",
            max_bytes=1 << 20,
        )
    )
    with pytest.raises(DownloadError, match=r"sent more than the 1048576 bytes"):
        fetch("endless", progress=False)
    # The client stopped reading and hung up: the server got rid of the bound, the client's read past
    # it and what the two sockets' buffers took, not the whole body a reader to the end takes (nor a
    # reader that checks the size only at the end). Bytes, not seconds: the same on a slow machine.
    assert srv.sent <= ENDLESS_BYTES // 4, srv.sent
    assert not cache.exists()  # no staging folder, lock file, nor the data folder this get made


def test_zip_bomb_is_refused_before_unpacking(tmp_path, cache, serve, registered):
    site = _site(tmp_path)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("B/b_train.txt", bytes(64 << 20))  # 64 MiB of zeros in about 64 KB
        z.writestr("B/b_test.txt", XC_SMALL)
    (site / "B.zip").write_bytes(buf.getvalue())
    assert len(buf.getvalue()) < 1 << 20
    base, _ = serve(site)
    registered(
        RemoteDataset(
            "bomb",
            (RemoteFile(f"{base}/B.zip", "B.zip", None, "zip"),),
            "B/b_train.txt",
            "B/b_test.txt",
            num_train=3,
            num_test=3,
        )
    )
    with pytest.raises(DownloadError, match=f"B.zip: its members claim {(64 << 20) + len(XC_SMALL)} bytes unpacked"):
        fetch("bomb", progress=False)
    assert not (cache / "bomb").exists() and not list(cache.glob(".bomb.staging*"))


def test_force_keeps_the_cached_copy_until_the_new_one_verified(tmp_path, cache, serve, registered):
    site = _site(tmp_path)
    base, _ = serve(site)
    sha = hashlib.sha256(XC_SMALL.encode()).hexdigest()
    registered(_pair("keep", base, sha))
    folder = fetch("keep", progress=False)
    (site / "te.txt").write_text("changed on the server\n")
    with pytest.raises(DownloadError, match="checksum mismatch"):
        fetch("keep", force=True, progress=False)
    assert is_fetched("keep") and (folder / "test.txt").read_text() == XC_SMALL
    (site / "te.txt").unlink()
    with pytest.raises(DownloadError, match="HTTP 404"):
        fetch("keep", force=True, progress=False)
    assert load_dataset("keep").num_classes == 2
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".keep.lock")) == ["keep"]


def test_two_concurrent_gets_of_one_dataset_download_once(tmp_path, cache, serve, registered):
    site = _site(tmp_path)
    base, srv = serve(site)
    sha = hashlib.sha256(XC_SMALL.encode()).hexdigest()
    registered(
        RemoteDataset(
            "twice",
            (RemoteFile(f"{base}/slow/tr.txt", "tr.txt", sha), RemoteFile(f"{base}/te.txt", "te.txt", sha)),
            "tr.txt",
            "te.txt",
        )
    )
    results, errors = [], []

    def get() -> None:
        try:
            results.append(fetch("twice", progress=False, log=io.StringIO()))
        except Exception as e:  # collected: the test fails on any
            errors.append(e)

    threads = [threading.Thread(target=get) for _ in range(2)]
    for t in threads:
        t.start()
        time.sleep(0.2)
    for t in threads:
        t.join(30)
    assert not errors and len(results) == 2 and results[0] == results[1]
    assert srv.hits.count("/slow/tr.txt") == 1  # the second waited for the lock, then found the copy
    assert (results[0] / "train.txt").read_text() == XC_SMALL and (results[0] / MARKER).is_file()


def test_trust_on_first_use_warns_records_and_refuses_a_change(tmp_path, cache, serve, registered, capsys):
    site = _site(tmp_path)
    base, _ = serve(site)
    registered(_pair("tofu", base))
    assert main(["data", "get", "tofu", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "warning: tofu: no checksum is recorded for tr.txt; trusting this first download" in err
    assert (cache / TRUST).is_file() and "tofu" in (cache / TRUST).read_text()
    (site / "tr.txt").write_text(XC_SMALL.replace("3:2", "3:3"))
    assert main(["data", "get", "tofu", "--force", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "trusted on first use" in err and "delete the 'tofu' entry" in err
    assert (cache / "tofu" / "train.txt").read_text() == XC_SMALL  # the good copy stays


def test_verify_notices_edits_to_the_cache(tmp_path, cache, serve, registered, capsys):
    base, _ = serve(_site(tmp_path))
    registered(_pair("edited", base, hashlib.sha256(XC_SMALL.encode()).hexdigest()))
    fetch("edited", progress=False)
    assert main(["data", "verify"]) == 0
    assert "all files match" in capsys.readouterr().out
    (cache / "edited" / "train.txt").write_text(XC_SMALL.replace("0:1", "0:9"))
    assert main(["data", "verify", "edited"]) == 1
    out = capsys.readouterr().out
    assert "train.txt" in out and "changed" in out
    with pytest.raises(ValueError, match=r"files changed since .* train\.txt \(changed\).*data get edited --force"):
        load_dataset("edited")


def _mulan_arff(xc_path: Path, num_labels: int) -> str:
    """An XC file rewritten as Mulan sparse ARFF (features, then the labels as the last attributes)."""
    lines = xc_path.read_text().splitlines()
    _, f, l = (int(v) for v in lines[0].split())
    out = ["@relation test", ""]
    out += [f"@attribute f{i} numeric" for i in range(f)] + [f"@attribute TAG_{j} {{0,1}}" for j in range(l)]
    out += ["", "@data"]
    for line in lines[1:]:
        head, _, rest = line.partition(" ")
        labels = [int(t) for t in head.split(",") if t] if ":" not in head else []
        feats = [(int(a), b) for a, b in (t.split(":") for t in (rest if ":" not in head else line).split())]
        items = [f"{i} {v}" for i, v in sorted(feats)] + [f"{f + j} 1" for j in sorted(labels)]
        out.append("{" + ",".join(items) + "}")
    return "\n".join(out) + "\n"


@pytest.mark.real_data("bibtex")
def test_get_bibtex_arff_from_a_local_server_gives_the_xc_files(tmp_path, cache, serve, registered):
    """The registry's Bibtex entry downloads Mulan's ARFF files and converts them. The real URLs
    (raw.githubusercontent.com at a pinned commit) cannot be reached here: the same entry is served
    from a local copy made from the shared XC files, with their checksums."""
    site = tmp_path / "mulan"
    site.mkdir()
    real = get_remote("bibtex")
    files = []
    for part, rf in zip(("train", "test"), real.files, strict=True):
        text = _mulan_arff(BIBTEX / f"{part}.txt", 159)
        (site / rf.name).write_text(text)
        files.append(RemoteFile(None, rf.name, hashlib.sha256(text.encode()).hexdigest()))
    base, _ = serve(site)
    local = RemoteDataset(
        "bibtex-local",
        tuple(RemoteFile(f"{base}/{f.name}", f.name, f.sha256) for f in files),
        real.train,
        real.test,
        real.format,
        real.num_features,
        real.num_labels,
        real.num_train,
        real.num_test,
    )
    registered(local)
    folder = fetch("bibtex-local", progress=False)
    from fedkernels.data import read_xc

    for part in ("train", "test"):
        got, want = read_xc(folder / f"{part}.txt"), read_xc(BIBTEX / f"{part}.txt")
        assert (got.features != want.features).nnz == 0 and (got.labels != want.labels).nnz == 0
    assert sorted(p.name for p in folder.iterdir()) == [MARKER, "test.txt", "train.txt"]


def test_builtin_bibtex_and_delicious_have_pinned_checksums():
    for name in ("bibtex", "delicious"):
        ds = get_remote(name)
        assert ds.format == "arff" and len(ds.files) == 2
        for f in ds.files:
            assert f.url.startswith("https://raw.githubusercontent.com/tsoumakas/mulan/43f6389095ad")
            assert len(f.sha256) == 64 and int(f.sha256, 16) >= 0


def test_one_data_variable_and_its_deprecated_alias(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDKERNELS_DATA_DIR", raising=False)
    monkeypatch.setenv("FEDKERNELS_DATA", str(tmp_path / "old"))
    with pytest.warns(FutureWarning, match=r"\$FEDKERNELS_DATA is deprecated: set \$FEDKERNELS_DATA_DIR"):
        assert cache_dir() == tmp_path / "old"
    monkeypatch.setenv("FEDKERNELS_DATA_DIR", str(tmp_path / "new"))
    assert cache_dir() == tmp_path / "new"


def _tiny_xc_folder(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "train.txt").write_text(XC_SMALL)
    (folder / "test.txt").write_text(XC_SMALL)
    return folder


@pytest.mark.parametrize("preset", ["fedalc-bibtex", "fedaws-bibtex", "fedmlh-bibtex", "l1diff-bibtex"])
def test_presets_take_bare_names_and_honour_data_dir(tmp_path, cache, preset):
    mine = _tiny_xc_folder(tmp_path / "mydata", "BibTeX")  # any case
    cfg = build_config(parser().parse_args(["run", "--preset", preset, "--data-dir", str(tmp_path / "mydata")]))
    assert Path(cfg.dataset) == mine


def test_bare_name_found_in_the_data_folder(tmp_path, cache):
    mine = _tiny_xc_folder(cache, "smallset")
    cfg = build_config(parser().parse_args(["run", "--dataset", "SmallSet"]))
    assert Path(cfg.dataset) == mine


def test_missing_dataset_says_where_it_looked(tmp_path, cache, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEDKERNELS_DATA_NO_FALLBACK")  # the suite's setting (conftest.py): a user's default
    assert main(["run", "--dataset", "nosuchset", "--data-dir", str(tmp_path / "dd"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "dataset 'nosuchset' not found, looked in: " in err
    fallbacks = (Path("data") / "nosuchset", Path("..") / "shared" / "data" / "nosuchset")
    for place in (tmp_path / "dd" / "nosuchset", cache / "nosuchset", *fallbacks):
        assert str(place) in err
    # FEDKERNELS_DATA_NO_FALLBACK=1: only --data-dir and the data folder, even where ./data has the name
    _tiny_xc_folder(tmp_path / "data", "nosuchset")
    assert Path(build_config(parser().parse_args(["run", "--dataset", "nosuchset"])).dataset).resolve() == (
        tmp_path / "data" / "nosuchset"
    )
    monkeypatch.setenv("FEDKERNELS_DATA_NO_FALLBACK", "1")
    assert main(["run", "--dataset", "nosuchset", "--data-dir", str(tmp_path / "dd"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"looked in: {tmp_path / 'dd' / 'nosuchset'}, {cache / 'nosuchset'} (" in err, err
    assert main(["run", "--dataset", "./no/such/path", "--no-progress"]) == 2
    assert "not found, looked in: no/such/path" in capsys.readouterr().err
