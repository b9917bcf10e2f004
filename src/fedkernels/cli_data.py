"""``fedkernels data list | info NAME | get NAME``: the registered public datasets and the local cache."""

from __future__ import annotations

import argparse


def _num(x: int | None) -> str:
    return "?" if x is None else f"{x:,}"


def cmd_data(args: argparse.Namespace) -> int:
    """Dispatch ``fedkernels data <action>``."""
    from .data import fetcher as fetch_mod
    from .data.remote import get_remote, remote_datasets

    if args.action == "list" or (args.action == "get" and not args.name):
        print(f"{'name':<16} {'train':>10} {'test':>9} {'features':>10} {'labels':>10}  status")
        for ds in remote_datasets():
            status = (
                "downloaded"
                if fetch_mod.is_fetched(ds.name)
                else "not downloaded"
                if all(f.url for f in ds.files)
                else "manual download"
            )
            print(
                f"{ds.name:<16} {_num(ds.num_train):>10} {_num(ds.num_test):>9} {_num(ds.num_features):>10} "
                f"{_num(ds.num_labels):>10}  {status}"
            )
        print(f"\ncache: {fetch_mod.cache_dir()} (set ${fetch_mod.ENV_VAR} to move it)")
        return 0
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
            print(f"  sha256: {f.sha256 or 'not recorded (get prints the one it computes)'}")
        if ds.notes:
            print(f"notes: {ds.notes}")
        folder = fetch_mod.dataset_dir(ds.name)
        print(f"cache: {folder} ({'downloaded' if fetch_mod.is_fetched(ds.name) else 'not downloaded'})")
        return 0
    folder = fetch_mod.fetch(ds.name, url=args.url, force=args.force, progress=not args.no_progress)
    print(f"{ds.name}: {folder}  (use it as `fedkernels run --dataset {ds.name}`)")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``data`` subcommand to ``fedkernels``'s subparsers."""
    d = sub.add_parser("data", help="list, describe and download public datasets")
    d.add_argument("action", choices=("list", "info", "get"))
    d.add_argument("name", nargs="?", help="a dataset name from `fedkernels data list` (any case)")
    d.add_argument("--url", help="get: download from this URL instead (a mirror, or file:///... for a manual download)")
    d.add_argument("--force", action="store_true", help="get: download again even if cached")
    d.add_argument("--no-progress", action="store_true", help="get: no progress bar")
    d.set_defaults(fn=cmd_data)
