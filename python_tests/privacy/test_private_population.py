"""PrivateServer's clients over a large population: made when a round first asks for them (a
ClientStore is not read at setup), each read from the store when it needs its data, and dropping
their round's secrets (the contribution in the clear, SecAgg+ keys) when the next round starts, so
what the server holds follows one round's cohort, not the clients ever sampled. Runs over a store
equal the runs over the list bit for bit."""

from __future__ import annotations

import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

from fedkernels.data.client_store import ClientStore, write_client_store
from fedkernels.fl import payload as pl
from fedkernels.fl.privacy import DPConfig, PrivacyConfig
from fedkernels.fl.privacy.client import TRAIN
from fedkernels.fl.privacy.secagg import SecAggError
from python_tests.support.flower_runs import client_data
from python_tests.support.hardening import same_state
from python_tests.support.private_runs import config, private_server

NUM = 12


def _clients(name: str) -> list:
    return [client_data(i, NUM, name) for i in range(NUM)]


def _history(s) -> list:
    return [(h.clients, h.failed, h.bytes_up, h.bytes_down, h.skipped, h.privacy) for h in s.history]


@pytest.mark.parametrize(
    "privacy",
    [PrivacyConfig(secagg=True), PrivacyConfig(dp=DPConfig(0.5, noise=1.0, delta=1e-5), noise_seed=3)],
    ids=["secagg", "central-dp"],
)
def test_a_store_population_is_read_per_round_and_equals_the_list(tmp_path, privacy):
    write_client_store(tmp_path / "s", _clients("fedavg"))
    store = ClientStore(tmp_path / "s", max_resident=0)
    cfg = config(rounds=4, per_round=4)
    s = private_server("fedavg", privacy, cfg, data=store)
    assert store.loads == 0 and s.private_clients.num_made == 0  # nothing read or made at setup
    s.run()
    ref = private_server("fedavg", privacy, cfg, data=_clients("fedavg"))
    ref.run()
    assert _history(s) == _history(ref) and same_state(s.state, ref.state)
    ever = {c for h in s.history for c in h.clients}
    assert s.private_clients.num_made == len(ever) < NUM
    assert store.loads > 0  # each client read when it needed its data, nothing kept by the store


def test_each_rounds_clients_drop_their_secrets_when_the_next_round_starts():
    """SecAgg+ keeps a client's contribution and session secrets through its round; after the next
    round starts only that round's clients hold any (before, every client ever sampled kept its
    last ones for the whole run)."""
    s = private_server("fedavg", PrivacyConfig(secagg=True), config(rounds=3, per_round=4), data=_clients("fedavg"))
    for _ in range(3):
        s.run_round()
        holding = {c for c in range(NUM) if s.private_clients[c]._vector is not None or s.private_clients[c]._sessions}
        assert holding == set(s.history[-1].clients)


def test_a_client_after_end_round_refuses_its_round_and_older_ones_and_answers_the_next():
    s = private_server("fedavg", PrivacyConfig(secagg=True), config(rounds=2, per_round=4), data=_clients("fedavg"))
    s.run_round()
    c = s.history[0].clients[0]
    client = s.private_clients[c]
    s.private_clients.end_round()
    assert client._vector is None and client._sessions == {} and client.round == 0
    with pytest.raises(SecAggError, match="a second 'train' in round 0"):
        client.handle(TRAIN, 0, 1, pl.encode({}))
    with pytest.raises(SecAggError, match="a message of round -1 after round 0"):
        client.handle(TRAIN, -1, 1, pl.encode({}))
    s.run_round()  # the next round runs with the same client objects
    assert not s.history[1].failed and not s.history[1].skipped


def test_private_clients_index_like_a_sequence():
    s = private_server("fedavg", PrivacyConfig(secagg=True), config(rounds=1, per_round=4), data=_clients("fedavg"))
    pc = s.private_clients
    assert len(pc) == NUM and pc[-1] is pc[NUM - 1] and pc[2:4] == [pc[2], pc[3]]
    assert [c.id for c in pc] == list(range(NUM))
    for bad in (NUM, -NUM - 1):
        with pytest.raises(IndexError, match="out of range"):
            pc[bad]
    with pytest.raises(TypeError):
        pc["1"]  # type: ignore[index]
