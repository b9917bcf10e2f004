"""The third hostile sweep's inputs (XMC filters and files, metrics, propensities, model sizes), for the
table in docs/api/hardening.md ("The third hostile sweep"): :func:`cases`, which
``python -m bench.fl.hardening_sweep`` runs after the second sweep's, each in its own peak-memory window
under RLIMIT_AS = the process's size + 2 GiB (so an input that got through fails there).

``--quick`` leaves out the p = 312,330 filter case. The cases use public names only, so the "before"
column comes from running them against the code before the fixes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from fedkernels.data import read_filter, read_sparse_text, read_xc
from fedkernels.fl import ClientData, FedAvg, RunConfig, Server
from fedkernels.metrics import precision_at_k
from fedkernels_cli import main as cli_main


class _Recording(FedAvg):
    """A linear FedAvg that remembers the widest prediction it was asked for."""

    def __init__(self) -> None:
        super().__init__(hidden=())
        self.widest = (0, 0)

    def predict_topk(self, state, x, k):
        self.widest = max(self.widest, (int(k), int(x.shape[0])))
        return super().predict_topk(state, x, k)


def _filter_case(num_classes: int, n: int = 2048, d: int = 64) -> Callable[[], str]:
    g = torch.Generator().manual_seed(0)
    test = ClientData(
        torch.randn(n, d, generator=g),
        torch.arange(n + 1, dtype=torch.int64),
        torch.randint(0, num_classes, (n,), generator=g),
        num_classes,
    )
    s = _Recording()
    server = Server(s, [test], d, num_classes, RunConfig(rounds=1, clients_per_round=1))
    counts = torch.zeros(n, dtype=torch.int64)
    counts[0] = num_classes  # one row's filter lists every label
    fp = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)])
    fi = torch.arange(num_classes, dtype=torch.int64)

    def run() -> str:
        got = server.evaluate(test, (1, 3, 5), 2048, test_filter=(fp, fi))
        width, rows = s.widest
        return f"P@1 {got['P@1']:.4f}; widest prediction {rows} rows x {width} classes"

    return run


def _unblock(path: Path, seconds: float) -> threading.Timer:
    """Open the FIFO's write end after ``seconds`` so a reader that blocked on it gets EOF."""

    def release() -> None:
        with contextlib.suppress(OSError):  # nobody was reading it
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    t = threading.Timer(seconds, release)
    t.start()
    return t


def _outcome(fn: Callable[[], object]) -> str:
    try:
        got = fn()
    except ValueError as e:
        return f"ValueError: {str(e).split(': ', 1)[-1] if str(e).startswith('/') else e}"
    return f"accepted: {got}"


def _fifo_case(fifo: Path, read: Callable[[Path], object]) -> Callable[[], str]:
    def run() -> str:
        timer = _unblock(fifo, 2.0)
        try:
            return _outcome(lambda: read(fifo))
        finally:
            timer.cancel()

    return run


def _cli(tmp: Path, config: str, *extra: str) -> str:
    f = tmp / "c3.toml"
    f.write_text(config)
    out = tmp / f"out{len(list(tmp.iterdir()))}"
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        code = cli_main(["run", "--config", str(f), "--no-progress", "--no-checkpoint", "--output", str(out), *extra])
    except BaseException as e:
        code = f"{type(e).__name__}"
    finally:
        sys.stderr = old
    text = err.getvalue().strip().replace(str(tmp), "<tmp>")
    if code == 0 and (out / "results.json").is_file():
        final = json.loads((out / "results.json").read_text())["results"][0]["final"]
        return f"exit 0: PSP@1 {final.get('PSP@1')}, PSnDCG@1 {final.get('PSnDCG@1')}"
    lines = [line for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return f"exit {code}: {last.split('error: ', 1)[-1]}" + (" (traceback)" if "Traceback" in text else "")


def cases(tmp: Path, quick: bool) -> list[tuple[str, Callable[[], str]]]:
    out: list[tuple[str, Callable[[], str]]] = []
    out.append(("evaluate: a filter row listing every label, N = 2048, p = 5000", _filter_case(5000)))
    if not quick:
        out.append(("evaluate: a filter row listing every label, N = 2048, p = 312,330", _filter_case(312_330)))
    fifo = tmp / "fifo3.txt"
    os.mkfifo(fifo)
    out.append(("read_sparse_text: a FIFO", _fifo_case(fifo, read_sparse_text)))
    out.append(("read_filter: a FIFO", _fifo_case(fifo, lambda p: read_filter(p, 3, 4))))
    short = tmp / "rows.txt"
    short.write_text("1000000 3 3\n0 0:1\n")
    out.append(("read_xc: header N = 10**6 in a 20-byte file", lambda: _outcome(lambda: read_xc(short))))
    dense = tmp / "tokens.txt"
    rows = 40_000
    dense.write_text(f"{rows} 10 5\n" + ("0 " + " ".join(["1:1"] * 50) + "\n") * rows)
    out.append(
        (
            f"read_xc: {dense.stat().st_size / 2**20:.1f} MiB of the smallest tokens ('1:1')",
            lambda: _outcome(lambda: read_xc(dense).features.nnz),
        )
    )
    topk, ptr = torch.tensor([[3], [0]]), torch.tensor([0, 0, 1])
    out.append(
        (
            "metrics: a label id of -1",
            lambda: _outcome(lambda: f"P@1 {precision_at_k(topk, ptr, torch.tensor([-1]), 1)}"),
        )
    )
    topk5 = torch.tensor([[5], [0], [0], [0], [2**62]])
    ptr5 = torch.tensor([0, 0, 0, 0, 0, 1])
    out.append(
        (
            "metrics: a predicted id of 2**62 (5 rows)",
            lambda: _outcome(lambda: f"P@1 {precision_at_k(topk5, ptr5, torch.tensor([1]), 1)}"),
        )
    )
    small = 'algorithms = ["FedAvg"]\nrounds = 1\nclients = 2\nclients_per_round = 2\nlocal_epochs = 1\n'
    small += "[synthetic]\nnum_samples = 200\nnum_features = 16\nnum_classes = 20\n"
    for b in ("0", "-1"):
        out.append((f"run: --propensity 0.55 {b}", lambda b=b: _cli(tmp, small, "--propensity", "0.55", b)))
    out.append(
        (
            "run: FedAvg hidden = [10**6, 10**6]",
            lambda: _cli(tmp, small + "[algorithm_options.FedAvg]\nhidden = [1000000, 1000000]\n"),
        )
    )
    tiny = tmp / "tiny"
    tiny.mkdir()
    (tiny / "train.txt").write_text(f"4 8 {2**26}\n0 0:1\n1 1:1\n2 2:1\n3 3:1\n")
    (tiny / "test.txt").write_text(f"2 8 {2**26}\n0 0:1\n1 1:1\n")
    size = sum(f.stat().st_size for f in tiny.iterdir())
    out.append(
        (
            f"run: a {size}-byte dataset declaring 2**26 classes (default algorithms)",
            lambda: _cli(tmp, "rounds = 1\nclients = 2\nclients_per_round = 2\n", "--dataset", str(tiny)),
        )
    )
    return out
