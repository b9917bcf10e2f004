"""tools/results.py: run folders slimmed in the tree, their full files restored from git history.

Each test builds a small git repository with a run folder as ``fedkernels run`` writes it and a raw
folder, commits it, and checks the tool against the committed bytes (``git show`` is the reference).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tools import results

RUN = "bench/results/fl/paper/demo/seed0"
RAW = "docs/gpu-runs"


def git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def run_json() -> dict:
    history = [
        {"round": r, "clients": list(range(50)), "bytes_up": 10, "bytes_down": 20, "metrics": {"P@1": 0.1 * r}}
        for r in range(3)
    ]
    per_round = [{"round": r, "bytes_up": 10, "cum_up": 10 * (r + 1)} for r in range(3)]
    result = {
        "algorithm": "FedAvg",
        "final": {"P@1": 0.2},
        "history": history,
        "comm": {"total_up": 30, "per_round": per_round},
    }
    return {"config": {"rounds": 3, "seed": 0}, "results": [result]}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    run = root / RUN
    run.mkdir(parents=True)
    (run / "results.json").write_text(json.dumps(run_json(), indent=2))
    (run / "rounds.csv").write_text("algorithm,round,P@1\nFedAvg,1,0.1\n")
    (run / "results.md").write_text("| algorithm | P@1 |\n")
    (run / "accuracy.png").write_bytes(bytes(range(256)) * 4)
    (run.parent / "seeds.md").write_text("seeds\n")
    raw = root / RAW
    raw.mkdir(parents=True)
    (raw / "log.json").write_text('{"ok": true}\n')
    (raw / "run.sh").write_text("echo hi\n")
    (root / "README.md").write_text("readme\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "full results")
    return root


def tree(root: Path) -> dict[str, bytes]:
    files = [p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def committed(repo: Path, path: str, rev: str = "HEAD") -> bytes:
    return subprocess.run(["git", "-C", str(repo), "show", f"{rev}:{path}"], check=True, capture_output=True).stdout


def test_slim_keeps_the_summary_and_drops_the_detail(repo: Path) -> None:
    measured = git(repo, "rev-parse", "HEAD").strip()
    (repo / "README.md").write_text("a later commit that leaves the results alone\n")
    git(repo, "commit", "-qam", "later")
    before = tree(repo)
    assert results.slim_folder(repo, repo / RUN, "run")
    after = tree(repo)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert changed == {f"{RUN}/results.json", f"{RUN}/accuracy.png", f"{RUN}/{results.MANIFEST}"}
    slim = json.loads(after[f"{RUN}/results.json"])
    full = run_json()
    assert slim["config"] == full["config"] and slim["results"][0]["final"] == {"P@1": 0.2}
    assert "history" not in slim["results"][0] and slim["results"][0]["comm"] == {"total_up": 30}
    assert {k: v for k, v in slim.items() if k != "slim"} == {
        "config": full["config"],
        "results": [{k: v for k, v in full["results"][0].items() if k != "history"} | {"comm": {"total_up": 30}}],
    }
    manifest = json.loads(after[f"{RUN}/{results.MANIFEST}"])
    assert set(manifest["files"]) == {"results.json", "accuracy.png"}
    for name, entry in manifest["files"].items():
        data = committed(repo, f"{RUN}/{name}")
        assert entry["commit"] == measured and entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["blob"] == git(repo, "rev-parse", f"{entry['commit']}:{RUN}/{name}").strip()
    assert manifest["committed_in"] == measured


def test_fetch_restores_byte_identical_files_after_the_slim_commit(repo: Path) -> None:
    full = tree(repo)
    results.slim_folder(repo, repo / RUN, "run")
    results.slim_folder(repo, repo / RAW, "raw")
    assert not any(p.startswith(RAW) and not p.endswith(results.MANIFEST) for p in tree(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "slim")
    slim = tree(repo)
    # into another folder: the tree stays as committed, nothing lands outside the destination
    dest = repo.parent / "full"
    written = results.fetch_folder(repo, repo / RUN, dest / RUN)
    assert tree(repo) == slim
    assert {p.relative_to(dest).as_posix() for p in written} == {f"{RUN}/results.json", f"{RUN}/accuracy.png"}
    assert tree(dest) == {p: full[p] for p in tree(dest)}
    # in place: the folders are as they were before slimming, plus the manifests
    results.fetch_folder(repo, repo / RUN)
    results.fetch_folder(repo, repo / RAW)
    now = tree(repo)
    assert {p: b for p, b in now.items() if not p.endswith(results.MANIFEST)} == full
    # slim again puts the committed slim files back: the working tree is clean
    assert results.slim_folder(repo, repo / RUN, "run") and results.slim_folder(repo, repo / RAW, "raw")
    assert tree(repo) == slim and git(repo, "status", "--porcelain") == ""
    assert not results.slim_folder(repo, repo / RUN, "run")  # nothing left to do


def test_fetch_refuses_a_hash_mismatch_and_writes_nothing(repo: Path) -> None:
    results.slim_folder(repo, repo / RUN, "run")
    path = repo / RUN / results.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["files"]["results.json"]["sha256"] = "0" * 64
    path.write_text(json.dumps(manifest))
    before = tree(repo)
    with pytest.raises(results.ResultsError, match="does not match the manifest's sha256"):
        results.fetch_folder(repo, repo / RUN)
    with pytest.raises(results.ResultsError, match="does not match"):
        results.fetch_folder(repo, repo / RUN, repo.parent / "elsewhere")
    assert tree(repo) == before and not (repo.parent / "elsewhere").exists()


def test_fetch_names_a_missing_object_and_a_bad_name(repo: Path) -> None:
    results.slim_folder(repo, repo / RUN, "run")
    path = repo / RUN / results.MANIFEST
    manifest = json.loads(path.read_text())
    manifest["files"]["results.json"]["blob"] = "1" * 40
    path.write_text(json.dumps(manifest))
    with pytest.raises(results.ResultsError, match="not in this clone"):
        results.fetch_folder(repo, repo / RUN)
    manifest["files"]["../escape.json"] = manifest["files"].pop("results.json")
    path.write_text(json.dumps(manifest))
    with pytest.raises(results.ResultsError, match="not a plain name"):
        results.fetch_folder(repo, repo / RUN)
    assert not (repo / RUN).parent.joinpath("escape.json").exists()


def test_slim_refuses_files_head_does_not_hold(repo: Path) -> None:
    (repo / RUN / "results.json").write_text(json.dumps({**run_json(), "config": {"rounds": 4}}))
    before = tree(repo)
    with pytest.raises(results.ResultsError, match="differs from HEAD"):
        results.slim_folder(repo, repo / RUN, "run")
    assert tree(repo) == before
    with pytest.raises(results.ResultsError, match="not a `fedkernels run` output"):
        results.slim_results_json(b"[1, 2]")


def test_cli_slims_the_default_folders_and_fetches_them(repo: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    full = tree(repo)
    monkeypatch.chdir(repo / "docs")  # any folder of the repository
    assert results.main(["slim"]) == 0
    assert "slimmed 2 of 2 folders" in capsys.readouterr().out
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "slim")
    assert results.main(["fetch", "--to", str(repo.parent / "out")]) == 0
    got = tree(repo.parent / "out")
    assert got == {p: full[p] for p in got} and len(got) == 4  # results.json, accuracy.png, log.json, run.sh
    assert results.main(["fetch", "gpu-runs"]) == 0  # a folder relative to the working directory
    assert (repo / RAW / "run.sh").read_bytes() == full[f"{RAW}/run.sh"]
    assert results.main(["slim", "."]) == 2  # docs/ holds no run folder and no manifest
    assert "no run folder" in capsys.readouterr().err


def test_committed_results_are_slim() -> None:
    # A run folder committed whole is slimmed in the next commit (docs/adding-an-algorithm.md): the tree
    # holds each run's slim results.json, named with its full form in the folder's manifest.
    from python_tests.support.paths import ROOT

    runs = results.find_run_folders(ROOT, ROOT / "bench" / "results")
    assert runs, "no run folder under bench/results"
    for folder in runs:
        assert (folder / results.MANIFEST).is_file(), f"{folder}: not slimmed (python -m tools.results slim)"
        manifest = json.loads((folder / results.MANIFEST).read_text())
        entry = manifest["files"]["results.json"]
        digest = hashlib.sha256((folder / "results.json").read_bytes()).hexdigest()
        assert digest in (entry["slim_sha256"], entry["sha256"]), folder  # slim, or fetched (make results-full)
        assert not (folder / "accuracy.png").exists() or "accuracy.png" in manifest["files"], folder
        assert all(len(e["blob"]) == 40 and len(e["sha256"]) == 64 for e in manifest["files"].values())
