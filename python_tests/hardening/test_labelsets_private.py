"""FedALC's label sets against a server-side adversary (issue "A server no client can exhaust or fool", item 4).

The adversary knows the run seed, the strategy's options, the label space size, its own copy of every
feature row and everything the server receives (label reports, requests, the state). It tries to
(a) recompute the clients' key from the seed, (b) enumerate all label ids against the digests and the
requested rows, (c) match instance digests to the feature rows. Each must fail (recovered fraction at
chance), while the same attack code with the clients' secret in hand recovers everything.
"""

from __future__ import annotations

import pytest
import torch

from fedkernels.fl import ClientData, RunConfig, Server, TrainConfig
from fedkernels.fl import labelsets as ls
from fedkernels.fl.algorithms import FedALC, FedAwS
from fedkernels.fl.algorithms.fedaws import class_pair_weights, client_class
from fedkernels.fl.seeding import derive_seed
from python_tests.support.fl_data import tiny_dataset

P, F_DIM, SEED = 32, 40, 7
SECRET = b"clients-only secret, out of band"


def shared_instance_clients() -> list[ClientData]:
    """Client c holds every sample labelled c (samples with several labels sit at several clients)."""
    data = tiny_dataset(160, num_features=F_DIM, num_classes=P, seed=3)
    out = []
    for c in range(P):
        rows = [i for i in range(len(data)) if c in data.indices[data.indptr[i] : data.indptr[i + 1]].tolist()]
        out.append(ClientData(data.x[torch.tensor(rows)], torch.arange(len(rows) + 1), torch.full((len(rows),), c), P))
    return out


class Observed:
    """Everything the server received in setup and one round."""

    def __init__(self, monkeypatch, strategy: FedALC) -> None:
        self.reports: list[ls.LabelReport] = []
        real_merge = ls.merge_reports

        def spy(reports):
            reports = list(reports)
            self.reports.extend(reports)
            return real_merge(reports)

        monkeypatch.setattr(ls, "merge_reports", spy)
        self.clients = shared_instance_clients()
        cfg = RunConfig(rounds=1, clients_per_round=P, train=TrainConfig(epochs=1, batch_size=16), seed=SEED)
        self.server = Server(strategy, self.clients, F_DIM, P, cfg)
        self.requested_row: dict[int, int] = {}  # the server's record: client -> requested row
        real_payload = strategy.client_payload

        def seen(state, client_id, request, round, seed):
            self.requested_row[client_id] = int(request["class_id"][0])
            return real_payload(state, client_id, request, round, seed)

        monkeypatch.setattr(strategy, "client_payload", seen)
        self.server.run_round()
        self.label_digests = {l for r in self.reports for _, l in r.pairs}
        self.instance_digests = {i for r in self.reports for i, _ in r.pairs}


def seed_keys() -> list[bytes]:
    """(a): every key the server could derive from what it knows (the run-seed derivation first)."""
    setup_seed = derive_seed(SEED, "setup")
    keys = [derive_seed(setup_seed, "labelset-key").to_bytes(8, "little") * 4]
    for s in (SEED, setup_seed, derive_seed(SEED, "init")):
        for tag in ("labelset-key", "key", "secret"):
            keys.append(derive_seed(s, tag).to_bytes(8, "little") * 4)
        keys.append(s.to_bytes(8, "little") * 2)
    return keys


def label_recovery(obs: Observed, keys: list[bytes]) -> float:
    """(b): fraction of the observed label digests mapped back to a label id by enumerating all ids."""
    found = {ls.label_digest(k, l) for k in keys for l in range(P)} & obs.label_digests
    return len(found) / len(obs.label_digests)


def row_recovery(obs: Observed, keys: list[bytes]) -> float:
    """(b): fraction of clients whose class id the server names from its requested row: guessing
    row == class, or the permutation of a candidate key, whichever is best."""
    truth = {cid: client_class(obs.clients[cid]) for cid in obs.requested_row}
    guesses = [{r: r for r in range(P)}] + [
        {int(row): c for c, row in enumerate(ls.class_permutation(k, P))} for k in keys
    ]
    return max(sum(g[obs.requested_row[cid]] == truth[cid] for cid in truth) for g in guesses) / len(truth)


def instance_recovery(obs: Observed, keys: list[bytes]) -> float:
    """(c): fraction of the observed instance digests matched to the server's own feature rows."""
    rows = [row.numpy() for c in obs.clients for row in c.x]
    found = {ls.instance_digest(k, r) for k in keys for r in rows} & obs.instance_digests
    return len(found) / len(obs.instance_digests)


@pytest.fixture
def observed(monkeypatch) -> Observed:
    return Observed(monkeypatch, FedALC(dim=8, hidden=(16,), k=3, client_secret=SECRET))


def test_server_without_the_secret_recovers_nothing(observed):
    keys = seed_keys()
    assert len(observed.label_digests) == P and len(observed.instance_digests) > 100
    assert label_recovery(observed, keys) == 0.0
    assert instance_recovery(observed, keys) == 0.0
    assert row_recovery(observed, keys) <= 3 / P  # chance: a random permutation has 1 fixed point on average


def test_same_attacks_with_the_secret_recover_everything(observed):
    keys = [*seed_keys(), SECRET]
    assert label_recovery(observed, keys) == 1.0
    assert instance_recovery(observed, keys) == 1.0
    assert row_recovery(observed, keys) == 1.0


def test_old_seed_derived_key_was_recoverable(monkeypatch):
    """The audit's finding, reproduced: keyed by the run seed, the server recomputes the key."""
    obs = Observed(monkeypatch, FedAwS(dim=8, hidden=(16,), k=3))  # rows are class ids
    old_key = seed_keys()[0]
    reports = [ls.client_report(old_key, [r.numpy() for r in c.x], c.indices.tolist()) for c in obs.clients]
    obs.label_digests = {l for r in reports for _, l in r.pairs}
    obs.instance_digests = {i for r in reports for i, _ in r.pairs}
    assert label_recovery(obs, seed_keys()) == 1.0 and instance_recovery(obs, seed_keys()) == 1.0
    assert row_recovery(obs, []) == 1.0  # FedAwS names classes by id: no label privacy there by design


def test_secret_is_random_when_not_given_and_never_stored(tmp_path):
    a, b = FedALC(dim=8), FedALC(dim=8)
    assert a._secret != b._secret and len(a._secret) == 32
    assert a.options()["client_key_id"] != b.options()["client_key_id"]
    clients = shared_instance_clients()
    ckpt = tmp_path / "run.ckpt"
    cfg = RunConfig(
        rounds=1, clients_per_round=4, train=TrainConfig(epochs=1, batch_size=16), seed=SEED, checkpoint=str(ckpt)
    )
    Server(FedALC(dim=8, hidden=(16,), k=3, client_secret=SECRET), clients, F_DIM, P, cfg).run()
    raw = ckpt.read_bytes()
    assert SECRET not in raw and SECRET.hex().encode() not in raw
    with pytest.raises(ValueError, match="client_key_id"):  # another secret cannot resume these rows
        Server(FedALC(dim=8, hidden=(16,), k=3, client_secret=b"x" * 32), clients, F_DIM, P, cfg)


@pytest.mark.parametrize("bad", [b"short", "a str secret", 12345])
def test_bad_secret_is_refused(bad):
    with pytest.raises(ValueError, match="client_secret"):
        FedALC(client_secret=bad)


def test_results_do_not_depend_on_the_secret():
    """The math is the same: class-space pair weights equal the plain ones; W is the same up to rows."""
    clients = shared_instance_clients()
    plain, _ = class_pair_weights(clients, b"k" * 32, P)
    perm = ls.class_permutation(SECRET, P)
    rowed, _ = class_pair_weights(clients, SECRET, P, perm)
    torch.testing.assert_close(rowed.dense()[perm][:, perm], plain.dense(), rtol=0, atol=0)
    runs = []
    for secret in (SECRET, b"another secret of the clients!!!"):
        s = FedALC(dim=8, hidden=(16,), k=3, client_secret=secret)
        cfg = RunConfig(rounds=2, clients_per_round=6, train=TrainConfig(epochs=1, batch_size=16), seed=SEED)
        srv = Server(s, clients, F_DIM, P, cfg)
        srv.run()
        runs.append((srv.state["W"][ls.class_permutation(secret, P)], srv))
    torch.testing.assert_close(runs[0][0], runs[1][0], rtol=1e-5, atol=1e-6)
    x = clients[0].x
    assert torch.equal(
        runs[0][1].strategy.predict_topk(runs[0][1].state, x, 3),
        runs[1][1].strategy.predict_topk(runs[1][1].state, x, 3),
    )


def test_class_permutation_is_a_permutation_and_keyed():
    p1, p2 = ls.class_permutation(SECRET, 1000), ls.class_permutation(b"y" * 16, 1000)
    assert torch.equal(torch.sort(p1).values, torch.arange(1000)) and not torch.equal(p1, p2)
    assert torch.equal(p1, ls.class_permutation(SECRET, 1000))
