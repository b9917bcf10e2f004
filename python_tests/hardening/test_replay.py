"""Replays (second hostile sweep): a client's round-0 upload sent again in later rounds was aggregated
every time. Uploads now carry the round they answer (``fedkernels.round`` in the safetensors
metadata, written by the honest client) and the round protocol refuses any other round's upload."""

from __future__ import annotations

from fedkernels.fl import payload as pl
from fedkernels.fl.client import ROUND_TAG
from python_tests.support.hardening import make_server, same_state, snapshot


class Replayer:
    """Honest in round 0, then sends its round-0 upload again every round."""

    def __init__(self, inner) -> None:
        self.inner, self.first = inner, None

    def request(self, round: int, seed: int):
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int):
        if self.first is None:
            self.first = self.inner.update(download, round, seed)
        return self.first


def test_replayed_upload_is_refused_in_every_later_round():
    s = make_server(rounds=3, num_clients=3, clients_per_round=3, wrapper=lambda c, e: Replayer(e) if c == 2 else e)
    hist = s.run()
    assert hist[0].failed == []
    for rec in hist[1:]:
        assert [c for c, _ in rec.failed] == [2]
        assert "tagged for round '0', this is round" in rec.failed[0][1]
        assert rec.failed[0][1].startswith("rejected: ")


def test_upload_without_a_round_tag_is_refused():
    def strip(up: bytes) -> bytes:
        return pl.encode(pl.decode(up))  # the same tensors, no metadata

    class Stripper:
        def __init__(self, inner) -> None:
            self.inner = inner

        def request(self, round, seed):
            return self.inner.request(round, seed)

        def update(self, download, round, seed):
            return strip(self.inner.update(download, round, seed))

    s = make_server(rounds=1, num_clients=3, clients_per_round=3, wrapper=lambda c, e: Stripper(e) if c == 1 else e)
    (rec,) = s.run()
    assert [(c, why.split(" (")[0]) for c, why in rec.failed] == [(1, "rejected: upload carries no round tag")]


def test_honest_uploads_carry_their_round():
    s = make_server(rounds=1)
    up = s.endpoints[0].update(pl.encode(s.strategy.client_payload(s.state, 0, None, 7, 1)), 7, 1)
    assert pl.read_metadata(up) == {ROUND_TAG: "7"}


def test_replay_of_the_previous_round_changes_nothing():
    """The replaying client is left out, so the run equals one where it sent nothing from round 1."""

    class Silent:
        def __init__(self, inner) -> None:
            self.inner = inner

        def request(self, round, seed):
            return self.inner.request(round, seed)

        def update(self, download, round, seed):
            return self.inner.update(download, round, seed) if round == 0 else None

    a = make_server(rounds=2, num_clients=3, clients_per_round=3, wrapper=lambda c, e: Replayer(e) if c == 1 else e)
    b = make_server(rounds=2, num_clients=3, clients_per_round=3, wrapper=lambda c, e: Silent(e) if c == 1 else e)
    a.run()
    b.run()
    assert same_state(snapshot(a.state), snapshot(b.state))
