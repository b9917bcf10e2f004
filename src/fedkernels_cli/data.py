"""``fedkernels data list | info NAME | get NAME | verify [NAME]``: the registered public datasets
and the data folder (the parser: :func:`fedkernels_cli.parser.add_data_parser`). ``list`` reads the
registry without importing fedkernels (and so torch): :mod:`fedkernels_cli.standalone`."""

from __future__ import annotations

import argparse
from pathlib import Path

from .standalone import load

MARKER = "fedkernels-complete.json"  # fedkernels.data.fetcher.MARKER, which test_cli_entry.py compares


def _num(x: int | None) -> str:
    return "?" if x is None else f"{x:,}"


def cmd_data(args: argparse.Namespace) -> int:
    """Dispatch ``fedkernels data <action>``."""
    locations, remote = load("data/locations.py"), load("data/remote.py")  # no torch: `list` needs no more
    DEPRECATED_ENV_VAR, ENV_VAR = locations.DEPRECATED_ENV_VAR, locations.ENV_VAR

    root = Path(args.data_dir).expanduser() if args.data_dir else locations.data_dir()
    if args.action == "list" or (args.action == "get" and not args.name):
        print(f"{'name':<16} {'train':>10} {'test':>9} {'features':>10} {'labels':>10}  status")
        for ds in remote.remote_datasets():
            status = locations.dataset_status(ds.name, args.data_dir)  # where `run --dataset NAME` finds it
            print(
                f"{ds.name:<16} {_num(ds.num_train):>10} {_num(ds.num_test):>9} {_num(ds.num_features):>10} "
                f"{_num(ds.num_labels):>10}  {status}"
            )
        print(f"\ndata folder: {root} (set ${ENV_VAR} or --data-dir to move it; ${DEPRECATED_ENV_VAR} is deprecated)")
        return 0
    from fedkernels.data import fetcher as fetch_mod
    from fedkernels.data.remote import get_remote

    if args.action == "verify":
        report = fetch_mod.verify(args.name, root)
        if not report:
            print(f"no fetched datasets in {root}")
            return 0
        bad = 0
        for name, files in report.items():
            for file, status in files.items():
                print(f"{name:<16} {file or '-':<24} {status}")
                bad += status != "ok"
        print(f"\n{'all files match' if not bad else f'{bad} file(s) do not match'} the SHA-256 recorded at fetch time")
        return 1 if bad else 0
    if not args.name:
        raise ValueError(f"`fedkernels data {args.action}` needs a dataset NAME (see `fedkernels data list`)")
    ds = get_remote(args.name)
    if args.action == "info":
        print(
            f"{ds.name}: format {ds.format}; {_num(ds.num_train)} train / {_num(ds.num_test)} test samples, "
            f"{_num(ds.num_features)} features, {_num(ds.num_labels)} labels"
        )
        print(f"page: {ds.page}")
        for f in ds.files:
            print(f"file {f.name}: {f.url or '(no direct URL recorded)'}")
            print(f"  sha256: {f.sha256 or 'not recorded (get trusts the first download and records it)'}")
        print(f"size bound: {ds.size_bound():,} bytes")
        if ds.notes:
            print(f"notes: {ds.notes}")
        folder = fetch_mod.dataset_dir(ds.name, root)
        print(f"folder: {folder} (where `get` puts it)")
        print(f"status: {locations.dataset_status(ds.name, args.data_dir)}")
        return 0
    folder = fetch_mod.fetch(ds.name, url=args.url, force=args.force, progress=not args.no_progress, root=root)
    print(f"{ds.name}: {folder}  (use it as `fedkernels run --dataset {ds.name}`)")
    return 0
