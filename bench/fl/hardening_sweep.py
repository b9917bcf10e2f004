"""The second and third hostile sweeps' inputs, each tried once: what happens, how long it takes, and how
much the process's peak memory grows (VmHWM, reset before each case), for the tables in
docs/api/hardening.md ("The second hostile sweep", "The third hostile sweep"; the third's cases are
:mod:`bench.fl.hardening_sweep3`).

    PYTHONPATH=src python -m bench.fl.hardening_sweep [--quick] [--out PATH]

``--quick`` leaves out the 10,000-round checkpoint and the large report (seconds instead of a minute).
Writes build/bench-results/hardening_sweep.json and prints a markdown table. Every case runs in this one
process, under RLIMIT_AS = its size + 2 GiB (an input that got through would fail there, not take the
machine).
"""

from __future__ import annotations

import argparse
import http.server
import io
import os
import resource
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from bench.common import markdown_table, results_path, write_results
from fedkernels import HashFamily
from fedkernels.data import RemoteDataset, RemoteFile, fetch, read_npz, read_xc, register, unregister
from fedkernels.fl import FedAvg, RunConfig, Server
from fedkernels.fl import labelsets as ls
from fedkernels.fl import payload as pl
from fedkernels.fl.algorithms.fedaws import FedALC
from fedkernels.fl.round import failure_reason, setup_exchange
from fedkernels.fl.types import RoundRecord
from fedkernels.ops.sketch import label_hash
from fedkernels_cli import main as cli_main


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def measure(name: str, fn: Callable[[], str]) -> dict:
    """Run ``fn`` (returns what happened) in a fresh peak-RSS window; its outcome, time and growth."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _kib("VmRSS")
    t0 = time.perf_counter()
    try:
        outcome = fn()
    except Exception as e:  # the table records what escaped, whatever it is
        outcome = f"{type(e).__name__}: {e}"
    return {
        "input": name,
        "outcome": outcome[:150],
        "ms": 1e3 * (time.perf_counter() - t0),
        "peak growth MiB": (_kib("VmHWM") - base) / 1024,
    }


def refused(fn: Callable[[], object]) -> str:
    try:
        fn()
    except ValueError as e:
        return f"ValueError: {str(e).split(': ', 1)[-1]}"
    return "accepted"


def npz_file(folder: Path, **changes: object) -> Path:
    buf = io.BytesIO()
    x = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0]], dtype=np.float32))
    base = x.tocsc() if changes.pop("csc", False) else x
    sp.save_npz(buf, base, compressed=False)
    with np.load(io.BytesIO(buf.getvalue())) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    path = folder / f"case{len(list(folder.iterdir()))}_X.npz"
    np.savez(path, **arrays)
    y = folder / "labels_Y.npz"
    sp.save_npz(y, sp.csr_matrix(np.eye(2, dtype=np.float32)))
    return path


class _Endless(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(bytes(1 << 16))
        except OSError:
            pass


def cases(tmp: Path, quick: bool) -> list[tuple[str, Callable[[], str]]]:
    out: list[tuple[str, Callable[[], str]]] = []
    y = tmp / "labels_Y.npz"
    files = tmp / "npz"
    files.mkdir()
    csc_bomb = npz_file(files, csc=True, indices=np.array([0, 1 << 40, 0], dtype=np.int64))
    out.append(("npz: CSC row index 2**40 (SIGSEGV before)", lambda: refused(lambda: read_npz(csc_bomb, y))))
    col = npz_file(files, indices=np.array([0, 2, 1 << 40], dtype=np.int64))
    out.append(("npz: CSR column 2**40 (accepted before)", lambda: refused(lambda: read_npz(col, y))))
    fmt = npz_file(files, format=np.array(3))
    out.append(("npz: format an int (AttributeError before)", lambda: refused(lambda: read_npz(fmt, y))))
    cplx = npz_file(files, data=np.array([1 + 2j, 2, 3], dtype=np.complex64))
    out.append(("npz: complex values (accepted before)", lambda: refused(lambda: read_npz(cplx, y))))
    latin = tmp / "latin1.txt"
    latin.write_bytes(b"1 4 3\n0 2:1 # caf\xe9\n")
    out.append(("XC file not UTF-8", lambda: refused(lambda: read_xc(latin))))
    fifo = tmp / "fifo.txt"
    os.mkfifo(fifo)
    out.append(("XC path a FIFO (hung before)", lambda: refused(lambda: read_xc(fifo))))
    out.append(("XC path /dev/zero", lambda: refused(lambda: read_xc("/dev/zero"))))
    table = HashFamily(2, 8, seed=0).table(12)
    buf = torch.full((6,), 2, dtype=torch.int64)
    buf[::2] = torch.tensor([0, 2, 10**9])
    out.append(
        (
            "label_hash: strided indptr [0, 2, 1e9] (SIGSEGV before)",
            lambda: refused(lambda: label_hash(buf[::2], torch.tensor([1, 5]), table, 8)),
        )
    )
    exp = torch.zeros(1, dtype=torch.int64).expand(5)
    out.append(
        (
            "label_hash: expanded indptr (SIGSEGV before)",
            lambda: f"ok, {tuple(label_hash(exp, torch.zeros(0, dtype=torch.int64), table, 8).shape)}",
        )
    )

    c = 3000
    secret = b"hardening-sweep-client-secret-01"
    s = FedALC(dim=8, hidden=(8,), client_secret=secret)
    state = s.init_state(8, c, 0)
    inst = ls.instance_digest(secret, b"x")
    digests = [ls.label_digest(secret, k) for k in range(c)]
    clique = pl.encode(
        {
            "pairs": torch.frombuffer(
                bytearray(b"".join(sorted(inst + d for d in digests))), dtype=torch.uint8
            ).reshape(c, 64),
            "label_digests": torch.frombuffer(bytearray(b"".join(digests)), dtype=torch.uint8).reshape(c, 32),
            "rows": s._permutation(c)[0].clone(),
        }
    )

    def setup(report: bytes) -> str:
        failed, _, new = setup_exchange(s, state, {0: report}, 0)
        return f"{failed.get(0, 'accepted')[:90]}; pair weights kept: {new['server.pair_indices'].numel()}"

    out.append(
        (f"FedALC setup: one instance x {c} labels, {len(clique) >> 10} KiB (658 MiB before)", lambda: setup(clique))
    )
    if not quick:
        n = 1 << 20
        big = pl.encode(
            {
                "pairs": torch.randint(0, 256, (n, 64), dtype=torch.uint8),
                "label_digests": torch.frombuffer(bytearray(digests[0]), dtype=torch.uint8).reshape(1, 32),
                "rows": torch.tensor([0]),
            }
        )
        out.append((f"FedALC setup: {len(big) >> 20} MiB report (65 s of CPU before)", lambda: setup(big)))

    rounds = 2_000 if quick else 10_000
    clients = _clients()
    server = Server(FedAvg(hidden=(64,)), clients, 64, 40, RunConfig(rounds=rounds, clients_per_round=5))
    why = failure_reason(ValueError("payload has unexpected tensors ['" + "w" * 4000 + "']"))
    server.history = [
        RoundRecord(i, [0, 1, 2, 3, 4], [(k, why) for k in (1, 2, 3, 4)], 10**7, 10**7, {"P@1": 0.5}, 1.0)
        for i in range(rounds)
    ]
    server.round = rounds
    ckpt = tmp / "long.ckpt"

    def save() -> str:
        server.save_checkpoint(ckpt)
        header = int.from_bytes(ckpt.read_bytes()[:8], "little")
        return f"saved {ckpt.stat().st_size / 2**20:.1f} MiB, header {header} B (unloadable after ~1,100 rounds before)"

    def load() -> str:
        fresh = Server(FedAvg(hidden=(64,)), clients, 64, 40, RunConfig(rounds=rounds, clients_per_round=5))
        fresh.load_checkpoint(ckpt)
        return f"resumed at round {fresh.round}"  # the server's in-memory history included

    def save_next() -> str:
        server.history.append(
            RoundRecord(rounds, [0, 1, 2, 3, 4], [(k, why) for k in (1, 2, 3, 4)], 10**7, 10**7, {}, 1.0)
        )
        server.round += 1
        server.save_checkpoint(ckpt)
        return f"saved round {server.round} ({ckpt.stat().st_size / 2**20:.1f} MiB): only the new records encoded"

    out.append((f"checkpoint: {rounds} rounds, 4 hostile clients a round: first save", save))
    out.append(("checkpoint: the save after the next round", save_next))
    out.append((f"checkpoint: {rounds + 1} rounds: load", load))
    for label, path in (("a FIFO", fifo), ("/dev/zero", Path("/dev/zero"))):
        out.append((f"checkpoint path {label}", lambda path=path: refused(lambda: server.load_checkpoint(path))))

    def cli(config: str, *extra: str) -> str:
        f = tmp / "c.toml"
        f.write_text(config)
        err = io.StringIO()
        old, sys.stderr = sys.stderr, err
        try:
            code = cli_main(["run", "--config", str(f), "--no-progress", *extra])
        finally:
            sys.stderr = old
        return f"exit {code}: {err.getvalue().strip().split('error: ', 1)[-1]}"

    out.append(("run: clients = 10**9 (MemoryError after a minute before)", lambda: cli("clients = 1000000000\n")))
    out.append(("run: threads = 10**6 (libgomp abort before)", lambda: cli("threads = 1000000\n")))
    out.append(("run: ks = [1.5] (TypeError at the first evaluation before)", lambda: cli("ks = [1.5]\n")))
    taken = tmp / "taken"
    taken.write_text("a file")
    out.append(
        (
            "run: output an existing file (results lost after training before)",
            lambda: cli("rounds = 1\n", "--output", str(taken)),
        )
    )

    site = tmp / "site"
    site.mkdir()
    zbuf = io.BytesIO()
    size = (64 if quick else 1024) << 20
    with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("B/b_train.txt", bytes(size))
        z.writestr("B/b_test.txt", b"1 1 1\n0 0:1\n")
    (site / "B.zip").write_bytes(zbuf.getvalue())
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    register(
        RemoteDataset(
            "sweep-bomb",
            (RemoteFile((site / "B.zip").as_uri(), "B.zip", None, "zip"),),
            "B/b_train.txt",
            "B/b_test.txt",
            num_train=3,
            num_test=3,
        ),
        replace=True,
    )
    register(
        RemoteDataset(
            "sweep-endless",
            (RemoteFile(f"{base}/x", "x.txt"), RemoteFile(f"{base}/y", "y.txt")),
            "x.txt",
            "y.txt",
            num_train=3,
            num_test=3,
        ),
        replace=True,
    )

    def get(name: str) -> str:
        try:
            fetch(name, progress=False, log=io.StringIO(), root=tmp / "data")
        except Exception as e:  # DownloadError expected; anything else is recorded too
            return f"{type(e).__name__}: {str(e)[:110]}"
        return "fetched"

    zmib = len(zbuf.getvalue()) / 2**20
    out.append((f"data get: {zmib:.2f} MiB zip of {size >> 20} MiB", lambda: get("sweep-bomb")))
    out.append(("data get: endless HTTP body", lambda: get("sweep-endless")))
    out.append(
        ("(cleanup)", lambda: (unregister("sweep-bomb"), unregister("sweep-endless"), srv.shutdown(), "done")[-1])
    )
    return out


def _clients() -> list:
    """Five small iid clients of the synthetic data (no test helpers: bench never imports tests)."""
    from fedkernels.data import iid_partition, make_clients, synthetic_multilabel

    d = synthetic_multilabel(200, 64, 40, seed=0)
    return make_clients(d.x, iid_partition(d.indptr, d.indices, 5, 0), 40)


def limit_memory() -> None:
    """RLIMIT_AS = the process's size + 2 GiB (an input that got through fails there, not the machine),
    after the one-off imports a case would otherwise pay inside its window."""
    vm = _kib("VmSize") * 1024
    resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
    # the optimizers' first use imports torch._dynamo (slow, and a large allocation): before the window, not in a row
    from fedkernels.fl.local import make_optimizer
    from fedkernels.fl.types import TrainConfig

    make_optimizer([torch.zeros(1, requires_grad=True)], TrainConfig(optimizer="adam"))


def main() -> int:
    from bench.fl.hardening_sweep3 import cases as third_sweep

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    limit_memory()
    with tempfile.TemporaryDirectory() as tmp:
        found = cases(Path(tmp), args.quick) + third_sweep(Path(tmp), args.quick)
        rows = [measure(name, fn) for name, fn in found]
    write_results("hardening_sweep", rows, {"quick": args.quick}, path=results_path("hardening_sweep", out=args.out))
    print(markdown_table(rows, ["input", "outcome", "ms", "peak growth MiB"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
