"""FedALC's setup exchange under hostile reports (second hostile sweep): the ``pairs`` tensor had no
element bound and the co-occurrence counts grow with C^2, so one 312 KB report (one instance holding
all C = 3000 labels) made the server count 9M pairs and keep them in its state and every checkpoint,
and a report claiming another client's row with another digest aborted the run. Now a report links
exactly one label digest (a FedALC client holds one class) and at most ``max_report_pairs`` pairs,
so it adds at most 2 (C - 1) pair weights; a second digest for a taken row is dropped."""

from __future__ import annotations

import torch

from fedkernels.data import make_clients, one_label_per_client
from fedkernels.fl import RunConfig, Server, TrainConfig
from fedkernels.fl import labelsets as ls
from fedkernels.fl import payload as pl
from fedkernels.fl.algorithms.fedaws import FedALC, label_report
from fedkernels.fl.round import setup_exchange
from fedkernels.fl.seeding import derive_seed

SECRET = b"setup-report-test-secret-0123456"
F = 8


def shared_instance_clients(num_classes: int, n: int = 40, seed: int = 0):
    """Samples with 1-3 labels among the first 6 classes, dealt one label per client (an instance
    with k labels reaches k clients): labels co-occur across clients, as in the papers."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, F, generator=g)
    sets = [sorted({int(v) for v in torch.randint(0, 6, (1 + i % 3,), generator=g)}) for i in range(n)]
    indptr = torch.tensor([0] + [sum(len(s) for s in sets[: i + 1]) for i in range(n)])
    indices = torch.tensor([c for s in sets for c in s])
    shards = one_label_per_client(indptr.numpy(), indices.numpy(), num_classes)
    return make_clients(x, shards, num_classes)


def strategy(**kw) -> FedALC:
    return FedALC(dim=4, hidden=(4,), client_secret=SECRET, **kw)


def honest_reports(s: FedALC, clients) -> dict[int, bytes]:
    return {c: pl.encode(s.setup_report(d)) for c, d in enumerate(clients)}


def run_setup(s: FedALC, reports: dict[int, bytes], num_classes: int):
    state = s.init_state(F, num_classes, 0)
    return setup_exchange(s, state, reports, derive_seed(0, "setup"))


def clique_report(s: FedALC, num_classes: int) -> bytes:
    """The sweep's attack: one instance holding every class, each label digest linked to its row."""
    perm = s._permutation(num_classes)[0]
    inst = ls.instance_digest(SECRET, b"one instance")
    digests = [ls.label_digest(SECRET, c) for c in range(num_classes)]
    pairs = b"".join(sorted(inst + d for d in digests))
    return pl.encode(
        {
            "pairs": torch.frombuffer(bytearray(pairs), dtype=torch.uint8).reshape(num_classes, 64),
            "label_digests": torch.frombuffer(bytearray(b"".join(digests)), dtype=torch.uint8).reshape(-1, 32),
            "rows": perm.clone(),
        }
    )


def test_clique_report_of_all_classes_is_refused_and_adds_nothing():
    c = 600
    s = strategy()
    clients = shared_instance_clients(c)
    reports = honest_reports(s, clients)
    failed0, _, clean = run_setup(s, reports, c)
    hostile = dict(reports)
    hostile[len(clients)] = clique_report(s, c)
    failed, _, state = run_setup(s, hostile, c)
    assert not failed0 and list(failed) == [len(clients)]
    assert failed[len(clients)].startswith("rejected: ")
    assert state["server.pair_indices"].numel() == clean["server.pair_indices"].numel() < 64


def test_report_longer_than_max_report_pairs_is_refused_on_its_length():
    s = strategy(max_report_pairs=16)
    clients = shared_instance_clients(50)
    d = clients[0]
    big = {
        "pairs": torch.zeros(64, 64, dtype=torch.uint8),  # 4 x the bound
        "label_digests": s.setup_report(d)["label_digests"],
        "rows": s.setup_report(d)["rows"],
    }
    failed, _, _ = run_setup(s, {0: pl.encode(big), 1: pl.encode(s.setup_report(clients[1]))}, 50)
    assert "exceeds the limit" in failed[0]
    assert 1 not in failed


def test_one_hostile_report_adds_at_most_two_rows_of_pair_weights():
    """A hostile client that copies every honest instance digest (it holds the clients' key) under
    its own class links one row: at most 2 (C - 1) more pair weights."""
    c = 200
    s = strategy()
    clients = shared_instance_clients(c)
    reports = honest_reports(s, clients)
    _, _, clean = run_setup(s, reports, c)
    insts = {p[0] for r in reports.values() for p in ls.LabelReport.from_tensor(pl.decode(r)["pairs"]).pairs}
    mine = 150  # a class nobody else holds
    d = ls.label_digest(SECRET, mine)
    pairs = b"".join(sorted(i + d for i in insts))
    evil = {
        "pairs": torch.frombuffer(bytearray(pairs), dtype=torch.uint8).reshape(-1, 64),
        "label_digests": torch.frombuffer(bytearray(d), dtype=torch.uint8).reshape(1, 32),
        "rows": s._permutation(c)[0][mine].reshape(1).clone(),
    }
    failed, _, state = run_setup(s, {**reports, 99: pl.encode(evil)}, c)
    assert not failed
    added = state["server.pair_indices"].numel() - clean["server.pair_indices"].numel()
    assert 0 < added <= 2 * (c - 1)


def test_second_digest_for_a_taken_row_is_dropped_not_fatal():
    """Before: 'duplicate (row, col) pairs in pair weights' from setup_from_reports aborted the run."""
    c = 50
    s = strategy()
    clients = shared_instance_clients(c)
    reports = honest_reports(s, clients)
    _, _, clean = run_setup(s, reports, c)
    victim = pl.decode(reports[0])
    insts = {p[0] for r in reports.values() for p in ls.LabelReport.from_tensor(pl.decode(r)["pairs"]).pairs}
    fake = ls.label_digest(SECRET, 10**6)  # another digest ...
    pairs = b"".join(sorted(i + fake for i in insts))
    hijack = {
        "pairs": torch.frombuffer(bytearray(pairs), dtype=torch.uint8).reshape(-1, 64),
        "label_digests": torch.frombuffer(bytearray(fake), dtype=torch.uint8).reshape(1, 32),
        "rows": victim["rows"].clone(),  # ... claiming client 0's row
    }
    failed, _, state = run_setup(s, {**reports, 99: pl.encode(hijack)}, c)
    assert not failed
    for k in ("server.pair_indptr", "server.pair_indices", "server.pair_values"):
        assert torch.equal(state[k], clean[k]), k  # the first link (client 0) holds


def test_honest_fedalc_run_is_unchanged():
    clients = shared_instance_clients(6)
    cfg = RunConfig(rounds=1, clients_per_round=2, train=TrainConfig(epochs=1, batch_size=8, lr=0.1), seed=1)
    srv = Server(strategy(), clients, F, 6, cfg)
    assert srv.setup_failed == {} and srv.state["server.pair_indices"].numel() > 0
    assert srv.setup_bytes_up == sum(
        len(pl.encode(label_report(d, SECRET, srv.strategy._permutation(6)[0]))) for d in clients
    )
