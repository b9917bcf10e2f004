"""Load: the Flower adapter with 100 clients, 30% of them faulty every round (crashes, time-outs,
empty, garbage, oversized uploads, bombs: python_tests/flower_load.py), completes, ends bit-identical
to the in-process run in which the faulty clients send nothing, and the server's peak RSS growth stays
within the bound of docs/api/hardening.md. The clients are a real Flower ClientApp in two worker
processes (not 100 SuperNodes: see flower_load.py); the figures at 10/30/100 clients come from
bench/flower_load.py."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

from python_tests.flower_load import MAX_UPLOAD, check, fault_of, flower_run, reference_run

CLIENTS, ROUNDS, SEED, TIMEOUT = 100, 2, 1, 5.0


def memory_bound_mib(clients: int) -> float:
    """docs/api/hardening.md: per round the server holds at most every chosen client's raw upload
    (<= max_upload_bytes) and its checked form (<= 2x that, e.g. decoded codec streams), plus a fixed
    64 MiB for the interpreter and allocator."""
    return 3 * clients * MAX_UPLOAD / 2**20 + 64


@pytest.mark.parametrize("strategy", ["l1diff"])  # codec bombs; bench/flower_load.py runs every family
def test_100_faulty_clients_over_flower(strategy):
    logging.getLogger("flwr").setLevel(logging.WARNING)
    fk, _seconds, peak_mib = flower_run(strategy, CLIENTS, ROUNDS, SEED, TIMEOUT)
    assert len(fk.history) == ROUNDS
    faulty = [[c for c in range(CLIENTS) if fault_of(SEED, r, c)] for r in range(ROUNDS)]
    assert all(0.2 * CLIENTS <= len(f) <= 0.4 * CLIENTS for f in faulty), [len(f) for f in faulty]
    for h, f in zip(fk.history, faulty, strict=True):
        assert [c for c, _ in h.failed] == f  # every faulty client failed, no honest one did
    kinds = {why.split(":")[0].split(" (")[0] for h in fk.history for _, why in h.failed}
    assert kinds == {"crashed", "timed out", "sent no upload", "rejected"}, kinds
    assert any("exceeds the limit" in why for h in fk.history for _, why in h.failed)  # oversized / bombs
    check(fk, reference_run(strategy, CLIENTS, ROUNDS, SEED))
    assert peak_mib <= memory_bound_mib(CLIENTS), peak_mib
