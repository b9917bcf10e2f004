"""Child process of ``hardening/test_memory_bound.py``: ``python -m python_tests.support.hardening_memory
STRATEGY`` runs a small federated run in-process twice, clean and then with hostile clients, and prints
one JSON line with, for each, the model size, the peak-RSS growth over the measured rounds and every
client failure.

Round 0 is a warm-up (honest; lazy imports, first allocations); then the peak-RSS window is reset
(VmHWM := VmRSS) and rounds 1..ROUNDS-1 run, with, in the hostile run, clients 1, 2, 4 and 5 (of 6; three chosen per
round) misbehaving in every round: a header claiming 2^40 elements, an upload twice the model's size, malformed
JSON, NaN values, the codec audit's bombs in an l1-difference upload, and FedSS's 16 MB request of
class 0 repeated. The hostile clients' own bytes (built once, before the window) live in the same
process; they are listed in ``client_bytes``. The child runs under RLIMIT_AS (its size + 2 GiB), so a
bomb that got through is a MemoryError, recorded as a crash and caught by the test."""

from __future__ import annotations

import json
import os
import resource
import struct
import sys

import torch

from fedkernels.fl import RunConfig, Server, TrainConfig
from fedkernels.fl import payload as pl
from fedkernels.fl.registry import make_strategy
from python_tests.fuzz.codec_streams import AUDIT_V1, v2
from python_tests.support.fl_data import tiny_clients

F = P = 512
NUM_CLIENTS, CLIENTS_PER_ROUND = 6, 3
ROUNDS = 6  # a warm-up and five rounds: every kind of misbehaviour at least once
OPTIONS = {
    "fedavg": {"hidden": (512,)},
    "fedss": {"num_negatives": 32, "embed_dim": 64, "hidden": (512,)},
    "l1diff": {"gamma": 0.05},
    "partialexchange": {"hidden": (512,)},
}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _header_bomb() -> bytes:
    h = json.dumps({"w": {"dtype": "F32", "shape": [1 << 40], "data_offsets": [0, 4]}}).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + bytes(4)


class Hostile:
    """Client endpoint that misbehaves in every round after the warm-up, in a way picked by round."""

    def __init__(self, inner, kinds: list[str], blobs: dict[str, bytes]) -> None:
        self.inner, self.kinds, self.blobs = inner, kinds, blobs  # blobs: built once, shared

    def request(self, round: int, seed: int) -> bytes | None:
        honest = self.inner.request(round, seed)
        if round > 0 and honest is not None and round % 2 == 1:  # the other rounds reach the upload
            return self.blobs["request_bomb"]
        return honest

    def update(self, download: bytes, round: int, seed: int) -> bytes | None:
        up = self.inner.update(download, round, seed)
        if round == 0:
            return up
        kind = self.kinds[(round - 1) % len(self.kinds)]
        if kind == "header_bomb":
            return _header_bomb()
        if kind == "oversized":
            return self.blobs["oversized"]
        if kind == "malformed":  # the header's opening brace replaced: not JSON
            return up[:8] + b"\xff" + up[9:]
        if kind == "nan":
            t = pl.decode(up)
            name = sorted(t)[0]
            if t[name].is_floating_point():
                t[name] = torch.full_like(t[name], float("nan"))
                return pl.encode(t)
            return _header_bomb()
        if kind == "codec_bomb":  # l1-difference uploads carry codec streams
            t = pl.decode(up)
            for i, name in enumerate(sorted(t)):
                bomb = v2(list(AUDIT_V1.values())[(round + i) % len(AUDIT_V1)])
                t[name] = torch.frombuffer(bytearray(bomb), dtype=torch.uint8)
            return pl.encode(t)
        raise AssertionError(kind)


def main(name: str, hostile: bool) -> dict:
    strategy = make_strategy(name, **OPTIONS[name])
    clients = tiny_clients(NUM_CLIENTS, per_client=16, num_features=F, num_classes=P)
    cfg = RunConfig(
        rounds=ROUNDS, clients_per_round=CLIENTS_PER_ROUND, train=TrainConfig(epochs=1, batch_size=16, lr=0.1), seed=2
    )
    kinds = ["header_bomb", "oversized", "malformed", "nan", "codec_bomb" if name == "l1diff" else "oversized"]
    blobs: dict[str, bytes] = {}

    def wrap(cid, inner):
        return Hostile(inner, kinds, blobs) if hostile and cid % 3 else inner  # two clients in three

    server = Server(strategy, clients, F, P, cfg, client_wrapper=wrap)
    model_bytes = sum(t.numel() * t.element_size() for t in server.state.values())
    if hostile:
        blobs["oversized"] = pl.encode({"w": torch.ones(model_bytes // 2)})  # 2 x the model (float32)
        blobs["request_bomb"] = pl.encode(  # the audit's 16 MB FedSS request: class 0, two million times
            {"class_ids": torch.zeros(1 << 21, dtype=torch.int64), "num_positives": torch.tensor([1])}
        )
    client_bytes = sum(len(b) for b in blobs.values())
    server.run_round()  # warm-up, all honest
    if not os.environ.get("FK_NO_RLIMIT"):
        vm = _status_kib("VmSize") * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:  # set once (the second run's limit counts from the first's)
            resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30), hard))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = _status_kib("VmRSS") / 1024
    failed = []
    while server.round < ROUNDS:
        rec = server.run_round()
        failed += [list(f) for f in rec.failed]
    growth = _status_kib("VmHWM") / 1024 - base
    return {
        "model_mib": model_bytes / 2**20,
        "growth_mib": growth,
        "client_mib": client_bytes / 2**20,
        "failed": failed,
        "finite": all(bool(torch.isfinite(t).all()) for t in server.state.values() if t.is_floating_point()),
    }


def _window() -> float:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS") / 1024


def _limit(extra_gib: int = 2) -> None:
    if not os.environ.get("FK_NO_RLIMIT"):
        vm = _status_kib("VmSize") * 1024
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_AS, (vm + (extra_gib << 30), hard))


SETUP_CLASSES = 3000  # the sweep's C: a report of one instance holding every class made C^2 pairs


def setup_main(hostile: bool) -> dict:
    """FedALC's setup exchange at C = 3000: six honest clients whose instances share labels, plus (hostile)
    the sweep's clique report (one instance, every class) and a report of twice ``max_report_pairs``
    pairs. Peak-RSS growth of ``setup_exchange`` (the server's side), the failures, the pair weights kept."""
    from fedkernels.fl.algorithms.fedaws import FedALC
    from fedkernels.fl.round import setup_exchange
    from fedkernels.fl.seeding import derive_seed
    from python_tests.hardening.test_setup_reports import SECRET, clique_report, shared_instance_clients

    c = SETUP_CLASSES
    s = FedALC(dim=8, hidden=(8,), client_secret=SECRET)
    clients = shared_instance_clients(c, n=400)
    reports = {i: pl.encode(s.setup_report(d)) for i, d in enumerate(clients)}
    if hostile:
        reports[90] = clique_report(s, c)
        n = 2 * s.max_report_pairs
        reports[91] = pl.encode(
            {
                "pairs": torch.randint(0, 256, (n, 64), dtype=torch.uint8),
                "label_digests": pl.decode(reports[0])["label_digests"],
                "rows": torch.tensor([c - 1]),
            }
        )
    state = s.init_state(8, c, 0)
    _limit()
    base = _window()
    failed, taken, new = setup_exchange(s, state, reports, derive_seed(0, "setup"))
    return {
        "growth_mib": _status_kib("VmHWM") / 1024 - base,
        "failed": sorted(failed),
        "pair_weights": int(new["server.pair_indices"].numel()),
        "largest_report_mib": max(len(r) for r in reports.values()) / 2**20,
        "taken_mib": taken / 2**20,
    }


LONG_ROUNDS = 10_000


def long_history_main() -> dict:
    """A checkpoint of a 10,000-round run in which four clients were rejected every round with long
    reasons (their records as the round protocol writes them), saved and loaded: the file's size and the
    peak-RSS growth of the save and the load (the history itself, in the server's memory, excluded)."""
    import tempfile
    from pathlib import Path

    from fedkernels.fl.round import failure_reason
    from fedkernels.fl.server import record_to_json
    from fedkernels.fl.types import RoundRecord

    strategy = make_strategy("fedavg", **OPTIONS["fedavg"])
    clients = tiny_clients(NUM_CLIENTS, per_client=16, num_features=F, num_classes=P)
    cfg = RunConfig(rounds=LONG_ROUNDS, clients_per_round=5, seed=2)
    server = Server(strategy, clients, F, P, cfg)
    why = failure_reason(ValueError("payload has unexpected tensors ['" + "w" * 4000 + "']"))
    metrics = {f"{m}@{k}": 0.123456789 for m in ("P", "nDCG", "PSP") for k in (1, 3, 5)}
    server.history = [
        RoundRecord(i, [0, 1, 2, 3, 4], [(c, why) for c in (1, 2, 3, 4)], 10**7, 10**7, dict(metrics), 1.25)
        for i in range(LONG_ROUNDS)
    ]
    server.round = LONG_ROUNDS
    history_mib = len(json.dumps([record_to_json(h) for h in server.history]).encode()) / 2**20
    _limit()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.ckpt"
        base = _window()
        server.save_checkpoint(path)
        save_growth = _status_kib("VmHWM") / 1024 - base
        size = path.stat().st_size
        base = _window()
        fresh = Server(make_strategy("fedavg", **OPTIONS["fedavg"]), clients, F, P, cfg)
        fresh.load_checkpoint(path)
        load_growth = _status_kib("VmHWM") / 1024 - base
    return {
        "file_mib": size / 2**20,
        "history_mib": history_mib,
        "model_mib": sum(t.numel() * t.element_size() for t in server.state.values()) / 2**20,
        "save_growth_mib": save_growth,
        "load_growth_mib": load_growth,
        "rounds": fresh.round,
        "same": [record_to_json(h) for h in fresh.history[-3:]] == [record_to_json(h) for h in server.history[-3:]],
    }


if __name__ == "__main__":
    if sys.argv[1] == "fedalc-setup":
        print(json.dumps({mode: setup_main(mode == "hostile") for mode in ("clean", "hostile")}))
    elif sys.argv[1] == "long-history":
        print(json.dumps(long_history_main()))
    else:
        # clean first, then hostile, in one process (one import): each measures its own peak-RSS window
        print(json.dumps({mode: main(sys.argv[1], mode == "hostile") for mode in ("clean", "hostile")}))
