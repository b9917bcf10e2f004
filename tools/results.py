"""Committed measurements, slim in the tree and whole in git history.

A run folder as ``fedkernels run`` writes it (``results.json`` beside ``rounds.csv``) keeps what a reader
needs to check a row: ``results.md`` (the summary), ``rounds.csv`` (the per-round curve: bytes, seconds,
privacy and metrics of every round), ``seeds.*`` one level up, and a slim ``results.json``: the config
(every option of the command), dataset, split, build, and per algorithm the final, late and best values,
the byte totals, diagnostics and privacy summary. What leaves the tree: each algorithm's ``history`` (the
per-round records: the clients drawn, failed and skipped, and the numbers ``rounds.csv`` holds),
``comm.per_round`` (``rounds.csv``'s bytes again) and ``accuracy.png`` (a plot of ``rounds.csv``). A raw
folder (``docs/gpu-runs``: logs of GPU sessions) leaves the tree whole.

``full-files.json`` in each slimmed folder names every full file by its git blob id, sha256, size and a
commit that holds it: the last commit that changed the folder before it was slimmed (``committed_in``,
the commit that recorded the measurement). ``fetch``
reads the blobs back from the clone's history (a shallow clone needs ``git fetch --unshallow``) and
writes them only after every hash matched.

    python -m tools.results slim                      # the default folders (bench/results, docs/gpu-runs)
    python -m tools.results slim bench/results/fl/paper/fedmlh-bibtex
    python -m tools.results fetch                     # every slimmed folder, in place (make results-full)
    python -m tools.results fetch FOLDER --to DIR     # into DIR/FOLDER, the tree untouched

A new run is committed whole first, then slimmed in the next commit (slim refuses files that differ
from HEAD). ``slim`` after an in-place ``fetch`` puts the slim files back (the tree is clean again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

MANIFEST = "full-files.json"
RUN_MARKERS = ("results.json", "rounds.csv")  # a folder holding both is a `fedkernels run` output
RUN_REMOVED = ("accuracy.png",)
FETCH_HINT = f"`python -m tools.results fetch` (or make results-full) restores the full files ({MANIFEST})"
DEFAULT_RUNS = ("bench/results",)  # searched for run folders
DEFAULT_RAW = ("docs/gpu-runs",)  # moved out whole


class ResultsError(RuntimeError):
    """A folder cannot be slimmed or fetched as asked (message says which file and why)."""


def _git(root: Path, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(["git", "-C", str(root), *args], input=stdin, capture_output=True)
    if done.returncode != 0:
        raise ResultsError(f"git {' '.join(args)}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def blob_id(data: bytes) -> str:
    """The git blob id (sha1) of ``data``, as ``git hash-object`` gives it."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def slim_results_json(data: bytes) -> bytes:
    """``results.json`` without each result's ``history`` and ``comm.per_round``, indented as the CLI writes it."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ResultsError("results.json has no 'results' list: not a `fedkernels run` output")
    for r in doc["results"]:
        r.pop("history", None)
        if isinstance(r.get("comm"), dict):
            r["comm"].pop("per_round", None)
    doc["slim"] = f"results[].history and comm.per_round left out (rounds.csv has the curves); {FETCH_HINT}"
    return json.dumps(doc, indent=2, default=str).encode()


def find_run_folders(root: Path, under: Path) -> list[Path]:
    """The run folders (``results.json`` beside ``rounds.csv``) at or below ``under``, sorted."""
    found = {p.parent for p in under.rglob(RUN_MARKERS[0]) if (p.parent / RUN_MARKERS[1]).is_file()}
    found |= {p.parent for p in under.rglob(MANIFEST) if _read_manifest(p.parent).get("kind") == "run"}
    return sorted(found)


def _read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    manifest: dict[str, Any] = json.loads(path.read_text())
    for name in manifest.get("files", {}):
        if "/" in name or "\\" in name or name in ("", ".", "..") or name == MANIFEST:
            raise ResultsError(f"{path}: file name {name!r} is not a plain name in this folder")
    return manifest


def _head_blobs(root: Path, folder: Path) -> dict[str, str]:
    """File name -> blob id of the files directly in ``folder`` at HEAD."""
    rel = folder.relative_to(root).as_posix()
    out = _git(root, "ls-tree", "-z", "HEAD", "--", rel + "/").decode()
    blobs = {}
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        kind, obj = meta.split()[1:3]
        if kind == "blob":
            blobs[path.rsplit("/", 1)[-1]] = obj
    return blobs


def slim_folder(root: Path, folder: Path, kind: str) -> bool:
    """Slim one folder (``kind`` "run" or "raw"); returns whether anything in the tree changed.

    Full files already named by the folder's manifest (a folder fetched in place) go back to their slim
    form; any other file must be committed at HEAD exactly as it is, so that HEAD holds it."""
    if kind not in ("run", "raw"):
        raise ValueError(f"kind must be 'run' or 'raw', got {kind!r}")
    root, folder = root.resolve(), folder.resolve()
    if not folder.is_relative_to(root) or not folder.is_dir():
        raise ResultsError(f"{folder} is not a folder of the repository at {root}")
    manifest = _read_manifest(folder)
    entries: dict[str, dict[str, Any]] = dict(manifest.get("files", {}))
    if kind == "run":
        names = ["results.json", *RUN_REMOVED]
    else:
        names = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name != MANIFEST)
    head: dict[str, str] | None = None
    commit = ""
    new_entries = False
    writes: dict[str, bytes | None] = {}  # name -> slim bytes, or None to remove
    for name in names:
        path = folder / name
        if not path.is_file():
            continue
        data = path.read_bytes()
        known = entries.get(name)
        if known and known.get("slim_sha256") == sha256(data):
            continue  # already slim
        if not (known and known["sha256"] == sha256(data)):  # a file the manifest does not name: HEAD must hold it
            head = _head_blobs(root, folder) if head is None else head
            if head.get(name) != blob_id(data):
                raise ResultsError(f"{path.relative_to(root)} differs from HEAD: commit the full files, then slim")
            # the last commit that changed the folder holds HEAD's files and survives a rebase of later commits
            rel = folder.relative_to(root).as_posix()
            commit = _git(root, "log", "-1", "--format=%H", "HEAD", "--", rel).decode().strip()
            entries[name] = {"blob": blob_id(data), "sha256": sha256(data), "bytes": len(data), "commit": commit}
            new_entries = True
        slim = slim_results_json(data) if kind == "run" and name == "results.json" else None
        if slim is not None:
            entries[name]["slim_sha256"] = sha256(slim)
        writes[name] = slim
    if not writes and not new_entries:
        return False
    if new_entries:
        rel = folder.relative_to(root).as_posix()
        manifest = {
            "about": f"The full files of this folder are in git history: `python -m tools.results fetch {rel}`",
            "kind": kind,
            "committed_in": commit,
            "files": dict(sorted(entries.items())),
        }
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    for name, slim in writes.items():
        if slim is None:
            (folder / name).unlink()
        else:
            (folder / name).write_bytes(slim)
    return True


def fetch_folder(root: Path, folder: Path, dest: Path | None = None) -> list[Path]:
    """Write the full files of a slimmed ``folder`` (into it, or into ``dest``); returns the paths written.

    Every blob is read and checked against the manifest's sha256 before any file is written."""
    root, folder = root.resolve(), folder.resolve()
    manifest = _read_manifest(folder)
    if not manifest:
        raise ResultsError(f"{folder} has no {MANIFEST}: nothing to fetch")
    blobs: dict[str, bytes] = {}
    for name, entry in manifest["files"].items():
        try:
            data = _git(root, "cat-file", "blob", entry["blob"])
        except ResultsError as err:
            raise ResultsError(
                f"{folder.name}/{name}: git object {entry['blob']} is not in this clone (a shallow clone needs "
                f"`git fetch --unshallow`; commit {entry.get('commit')} holds it): {err}"
            ) from err
        if sha256(data) != entry["sha256"] or len(data) != entry["bytes"]:
            raise ResultsError(f"{folder.name}/{name}: blob {entry['blob']} does not match the manifest's sha256")
        blobs[name] = data
    target = folder if dest is None else dest.resolve()
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in blobs.items():
        (target / name).write_bytes(data)
        written.append(target / name)
    return written


def _default_folders(root: Path) -> list[tuple[Path, str]]:
    folders = [(f, "run") for d in DEFAULT_RUNS if (root / d).is_dir() for f in find_run_folders(root, root / d)]
    return folders + [(root / d, "raw") for d in DEFAULT_RAW if (root / d).is_dir()]


def _given_folders(root: Path, paths: list[str], raw: bool) -> list[tuple[Path, str]]:
    folders: list[tuple[Path, str]] = []
    for p in paths:
        path = (Path.cwd() / p).resolve()
        if raw:
            folders.append((path, "raw"))
            continue
        runs = find_run_folders(root, path) if path.is_dir() else []
        if not runs:
            kind = _read_manifest(path).get("kind") if path.is_dir() else None
            if kind is None:
                raise ResultsError(
                    f"{p}: no run folder (results.json beside rounds.csv) here; --raw moves a folder whole"
                )
            folders.append((path, kind))
        else:
            folders += [(r, "run") for r in runs]
    return folders


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.results", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser(
        "slim", help="slim the given folders (default: every run folder in bench/results, docs/gpu-runs)"
    )
    s.add_argument("folders", nargs="*")
    s.add_argument("--raw", action="store_true", help="move the given folders' files out whole")
    f = sub.add_parser("fetch", help="restore the full files from git history (default: every slimmed folder)")
    f.add_argument("folders", nargs="*")
    f.add_argument("--to", type=Path, help="write into TO/<folder path> instead of the folder")
    args = ap.parse_args(argv)
    root = Path(_git(Path.cwd(), "rev-parse", "--show-toplevel").decode().strip()).resolve()
    try:
        if args.cmd == "slim":
            todo = _given_folders(root, args.folders, args.raw) if args.folders else _default_folders(root)
            changed = sum(slim_folder(root, folder, kind) for folder, kind in todo)
            print(f"slimmed {changed} of {len(todo)} folders")
        else:
            if args.folders:
                todo = _given_folders(root, args.folders, raw=False)
            else:
                todo = [
                    (p.parent, "") for d in (*DEFAULT_RUNS, *DEFAULT_RAW) for p in sorted((root / d).rglob(MANIFEST))
                ]
            n = 0
            for folder, _ in todo:
                dest = None if args.to is None else args.to / folder.resolve().relative_to(root)
                n += len(fetch_folder(root, folder, dest))
            print(f"restored {n} files in {len(todo)} folders" + (f" under {args.to}" if args.to else ""))
    except ResultsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
