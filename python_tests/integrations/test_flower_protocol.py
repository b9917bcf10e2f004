"""The Flower adapter's protocol pieces, fast and without processes: payloads as ArrayRecords (round
trip to the bit, hostile records refused before a tensor is built), the per-message deadline under
queueing, and nodes that come and go (the in-memory grid of python_tests/support/flower_grid.py)."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("flwr", reason="flwr is not installed (pip install 'fedkernels[flower]')")

from flwr.app import Array, ArrayRecord, Message, RecordDict

from fedkernels.fl import Server
from fedkernels.fl import evaluation as ev
from fedkernels.fl import payload as pl
from fedkernels.fl.round import Round
from fedkernels.integrations.flower import (
    ArrayCache,
    FlowerStrategy,
    NodeRegistry,
    client_app,
    payload_to_record,
    record_to_bytes,
    record_to_payload,
)
from fedkernels.integrations.flower import server as flower_server
from fedkernels.integrations.flower.exchange import PendingExchange, exchange
from fedkernels.integrations.flower.protocol import identity_mismatch, run_identity
from fedkernels.integrations.flower.records import record_to_carried, tensor_to_array
from python_tests.support.fl_data import tiny_clients
from python_tests.support.flower_grid import MemoryGrid, context, task_identity
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, make_strategy, run_config
from python_tests.support.hardening import same_state

DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.uint8, torch.int8, torch.bool]


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    task_identity(monkeypatch)


# ---- payloads as ArrayRecords --------------------------------------------------------------------
@st.composite
def payloads(draw):
    n = draw(st.integers(0, 4))
    out = {}
    for i in range(n):
        dtype = draw(st.sampled_from(DTYPES))
        shape = tuple(draw(st.lists(st.integers(0, 5), max_size=3)))
        t = torch.arange(int(np.prod(shape, dtype=np.int64)), dtype=torch.int64).reshape(shape) * (i + 3) - 7
        out[f"t{i}.{dtype}".replace("torch.", "")] = t.to(dtype)
    return out


@given(payloads())
def test_record_round_trip_is_the_payload_bytes(payload):
    """payload -> ArrayRecord -> checked bytes is exactly pl.encode(payload): the round protocol
    counts and checks the same bytes as for an in-process client."""
    raw = record_to_bytes(payload_to_record(payload))
    assert raw == pl.encode(payload)
    got = record_to_payload(payload_to_record(payload))
    assert got.keys() == payload.keys()
    assert all(got[k].dtype == payload[k].dtype and torch.equal(got[k], payload[k]) for k in payload)


@given(payloads())
def test_arrays_are_numpys_bytes_and_carried_uploads_count_the_same_bytes(payload):
    """tensor_to_array writes exactly what Flower's Array(ndarray) (np.save) writes, the first time
    for a dtype and shape and after (its header remembered); record_to_carried hands over the same
    tensors counted at the length of record_to_bytes' bytes, round tag and all."""
    for _ in range(2):
        for t in payload.values():
            want = Array(t.contiguous().numpy())
            got = tensor_to_array(t)
            assert (got.data, got.dtype, got.shape, got.stype) == (want.data, want.dtype, want.shape, want.stype)
    record = payload_to_record(payload)
    for meta in (None, {"round": "3"}):
        carried = record_to_carried(record, metadata=meta)
        assert carried.nbytes == len(record_to_bytes(record, metadata=meta))
        assert carried.metadata == (meta or {})
        assert carried.payload.keys() == payload.keys()
        assert all(torch.equal(carried.payload[k], payload[k]) for k in payload)


def npy(shape, dtype="<f4", body=b"", fortran=False) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(f, {"descr": dtype, "fortran_order": fortran, "shape": shape})
    return f.getvalue() + body  # (the header writer writes the magic too)


GOOD = Array(np.arange(6, dtype=np.float32))
NP = "numpy.ndarray"
HOSTILE = {
    "not a record": ({"w": GOOD}, "must be an ArrayRecord"),
    "other stype": (ArrayRecord({"w": Array("float32", (2,), "raw", bytes(8))}), "stype 'raw'"),
    "garbage bytes": (ArrayRecord({"w": Array("float32", (2,), NP, b"\x07" * 200)}), "not NumPy .npy"),
    "broken header": (
        ArrayRecord({"w": Array("float32", (2,), NP, b"\x93NUMPY\x01\x00\xff")}),
        "malformed",
    ),
    "claims disagree": (
        ArrayRecord({"w": Array("float32", (3,), NP, npy((2,), body=bytes(8)))}),
        "claims",
    ),
    "short body": (ArrayRecord({"w": Array("float32", (4,), NP, npy((4,), body=bytes(8)))}), "needs 16"),
    "header bomb": (
        ArrayRecord({"w": Array("float32", (1 << 40,), NP, npy((1 << 40,), body=bytes(8)))}),
        "needs 4398046511104 bytes, it holds 8",
    ),
    "fortran": (
        ArrayRecord({"w": Array("float32", (2, 2), NP, npy((2, 2), fortran=True, body=bytes(16)))}),
        "Fortran",
    ),
    "big endian": (
        ArrayRecord({"w": Array("float32", (2,), NP, npy((2,), ">f4", bytes(8)))}),
        "little-endian",
    ),
    "object dtype": (ArrayRecord({"w": Array("object", (2,), NP, npy((2,), "|O", bytes(16)))}), "dtype"),
    "too many": (ArrayRecord({f"a{i}": GOOD for i in range(4097)}), "more than 4096"),
    "over the limit": (ArrayRecord({"w": Array(np.zeros(300, dtype=np.uint8))}), "exceeds the limit of 256"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("convert", [record_to_bytes, record_to_carried])
def test_hostile_records_are_refused_before_any_tensor(case, convert):
    record, match = HOSTILE[case]
    with pytest.raises(pl.PayloadError, match=match):
        convert(record, max_bytes=256)


def test_a_header_seen_before_still_has_its_body_checked():
    """A remembered .npy header skips only its parse: the claims and the body length are checked again."""
    header = npy((4,))
    record_to_payload(ArrayRecord({"w": Array("float32", (4,), NP, header + bytes(16))}))  # seen, fine
    with pytest.raises(pl.PayloadError, match="needs 16"):
        record_to_payload(ArrayRecord({"w": Array("float32", (4,), NP, header + bytes(8))}))
    with pytest.raises(pl.PayloadError, match="claims"):
        record_to_payload(ArrayRecord({"w": Array("float32", (2, 2), NP, header + bytes(16))}))


def test_array_cache_shares_arrays_until_a_tensor_changes():
    state = {"w": torch.ones(3), "b": torch.zeros(2)}
    cache = ArrayCache()
    a, b = payload_to_record(dict(state), cache), payload_to_record(dict(state), cache)
    assert len(cache) == 2  # converted once; Flower's records share the bytes, and so their object ids
    assert a["w"].data is b["w"].data and a["b"].data is b["b"].data and a["w"].object_id == b["w"].object_id
    state["w"].add_(1)  # an in-place write: a new version, a new Array with the new values
    c = payload_to_record(dict(state), cache)
    assert c["w"].data is not a["w"].data and np.array_equal(c["w"].numpy(), np.full(3, 2.0, dtype=np.float32))


def test_round_serialises_a_shared_download_once():
    """Every FedAvg client gets the global state: one bytes object, counted per client as before."""
    strategy = make_strategy("fedavg")
    state = strategy.init_state(NUM_FEATURES, NUM_CLASSES, 0)
    rnd = Round(strategy, state, 0, [0, 1, 2], 0)
    downs = rnd.downloads({})
    assert downs[0] is downs[1] is downs[2] and downs[0] == pl.encode(strategy.client_payload(state, 0, None, 0, 0))
    assert [rnd.bytes_down(c) for c in range(3)] == [len(downs[0])] * 3


# ---- the deadline under queueing ------------------------------------------------------------------
class QueueGrid:
    """A fake grid on a fake clock: ``workers`` serve the pushed messages in order, ``service``
    seconds each; messages to ``hung`` nodes are taken by a worker and never answered. Tracks the
    most messages out (pushed, reply not pulled) at once."""

    def __init__(self, workers: int, service: float, hung=()) -> None:
        self.service, self.hung, self.now = service, set(hung), 0.0
        self.free = [0.0] * workers
        self.ready: dict[str, tuple[float, Message]] = {}
        self.out: set[str] = set()
        self.most = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, dt: float) -> None:
        self.now += dt

    def push_messages(self, messages):
        ids = []
        for m in messages:
            mid = f"q{len(self.out) + len(self.ready) + self.now:.3f}-{id(m)}"
            w = min(range(len(self.free)), key=lambda k: self.free[k])
            start = max(self.free[w], self.now)
            hung = m.metadata.dst_node_id in self.hung
            self.free[w] = float("inf") if hung else start + self.service
            m.metadata.__dict__["_message_id"] = mid
            if not hung:
                self.ready[mid] = (self.free[w], Message(RecordDict({}), reply_to=m))
            self.out.add(mid)
            ids.append(mid)
        self.most = max(self.most, len(self.out))
        return ids

    def pull_messages(self, ids):
        got = [self.ready.pop(mid)[1] for mid in list(ids) if mid in self.ready and self.ready[mid][0] <= self.now]
        self.out -= {r.metadata.reply_to_message_id for r in got}
        return got


def test_deadline_counts_per_message_not_per_fan_out():
    """40 messages on 2 workers, 1 s each, a 3 s timeout per message, node 7 hangs a worker: the
    last reply comes at 36 s, long after one 3 s fan-out deadline, and is taken; the hung node's
    message is given up 3 s after the last reply; with the only worker hung, the wait ends after 3 s."""
    grid = QueueGrid(workers=2, service=1.0, hung={7})
    msgs = {n: Message(RecordDict({}), n, "train", group_id="1") for n in range(40)}
    got = exchange(grid, msgs, timeout=3.0, clock=grid.clock, sleep=grid.sleep)
    assert sorted(got) == sorted(set(range(40)) - {7})
    assert 36.0 <= grid.now <= 39.5, grid.now  # the queue (one worker stuck from 3 s on) + the 3 s timeout
    stalled = QueueGrid(workers=1, service=1.0, hung={0})  # the first message hangs the only worker
    got = exchange(stalled, msgs, timeout=3.0, clock=stalled.clock, sleep=stalled.sleep)
    assert got == {} and stalled.now <= 3.5


@pytest.mark.parametrize("window", [None, 3])
def test_a_pending_exchange_pushes_at_once_and_takes_replies_that_came_meanwhile(window):
    """What the cohort server asks early: the messages are out when the exchange is made (all of
    them, or the window's first), the caller works meanwhile (here: the clock passes every reply's
    time, but not the timeout), and collect takes the replies that came at its first pull (the rest of
    a window as room frees), the same replies as one exchange."""
    msgs = {n: Message(RecordDict({}), n, "query", group_id="q") for n in range(8)}
    grid = QueueGrid(workers=8, service=1.0)
    pending = PendingExchange(grid, msgs, timeout=5.0, window=window, clock=grid.clock, sleep=grid.sleep)
    assert grid.most == (8 if window is None else 3) and not pending.replies
    grid.now += 4.0  # the caller's own work: the pushed messages were served meanwhile
    got = pending.collect()
    assert sorted(got) == list(range(8)) and all(got[n].metadata.reply_to_message_id for n in got)
    # no wait for what came; a window of 3 serves the other 5 in two more turns (a poll of at most 0.5 s late each)
    assert grid.now <= (4.0 if window is None else 4.0 + 2 * (1.0 + 0.5)), grid.now
    assert pending.collect() == got  # collected once: a second collect returns the same, waits none
    again = QueueGrid(workers=8, service=1.0)
    assert sorted(exchange(again, msgs, 5.0, window, again.clock, again.sleep)) == sorted(got)


# ---- nodes that come and go --------------------------------------------------------------------------
def apps_grid(nodes: dict[int, int], strategy=lambda: make_strategy("fedavg")) -> MemoryGrid:
    """node id -> client id, each node a real client_app."""
    app = client_app(lambda ctx: strategy(), lambda ctx: client_data(int(ctx.node_config["partition-id"]), 4))
    return MemoryGrid({n: (app, context(n, c)) for n, c in nodes.items()})


class Scripted(FlowerStrategy):
    """Calls ``script[r](grid)`` before round r: the test's hand on the nodes between rounds."""

    def __init__(self, script, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.script = script

    def configure_train(self, server_round, arrays, config, grid):
        self.script.get(server_round - 1, lambda g: None)(grid)
        return super().configure_train(server_round, arrays, config, grid)


class _VirtualClock:
    """Stands in for the Flower server module's ``time``: ``monotonic`` (used only by the start-up
    loop) moves only by ``sleep``, so the loop's waits are counted, never measured; anything else
    (the round's reported seconds) is the real module's."""

    def __init__(self) -> None:
        self.now = 0.0

    def __getattr__(self, name: str):
        return getattr(time, name)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_leave_rejoin_duplicate_and_startup_grace(monkeypatch):
    """Client 3's node is missing at start (round 0 starts after the grace, not the timeout); client
    1's node leaves before round 1 ("gone"), and a new node claiming client 1 joins before round 2
    and is used, leaves, and comes back under the same node id (asked again, used again); a node
    claiming client 0, which another node serves, is refused as a duplicate, then takes over when
    that node leaves. The state equals the in-process run with the same
    clients silent in the same rounds."""
    grid = apps_grid({10: 0, 11: 1, 12: 2, 20: 0})
    late = apps_grid({13: 3, 21: 1})

    def add(node):
        return lambda g: g.apps.update({node: late.apps[node]})

    script = {
        1: lambda g: g.offline.add(11),
        2: add(21),
        3: lambda g: (g.offline.add(10), add(13)(g), g.offline.add(21)),
        4: lambda g: g.offline.discard(21),  # back under the same node id: asked again, serves client 1
    }
    fk = Scripted(
        script, make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, 4, run_config(5, 4, 9, timeout=5), startup_grace=0.2
    )
    monkeypatch.setattr(flower_server, "time", _VirtualClock())
    fk.start(grid, timeout=5)
    failed = [h.failed for h in fk.history]
    assert failed == [
        [(3, "not connected")],
        [(1, "gone (node left)"), (3, "not connected")],
        [(3, "not connected")],
        [(1, "gone (node left)")],
        [],
    ]
    kinds = [(e.round, e.kind, e.node, e.client) for e in fk.nodes.events]
    assert (0, "refused", 20, 0) in kinds and (1, "left", 11, 1) in kinds and (2, "joined", 21, 1) in kinds
    assert (3, "left", 10, 0) in kinds and (3, "took over", 20, 0) in kinds and (3, "joined", 13, 3) in kinds
    assert (3, "left", 21, 1) in kinds and (4, "joined", 21, 1) in kinds
    # on the virtual clock: the start-up loop slept the grace, then started without client 3 (not
    # the 5 s timeout); a slow machine changes no virtual second
    assert fk.discovery_seconds == pytest.approx(0.2)
    silent = {0: {3}, 1: {1, 3}, 2: {3}, 3: {1}}

    class Silent:
        def __init__(self, inner, cid):
            self.inner, self.cid = inner, cid

        def request(self, r, s):
            return self.inner.request(r, s)

        def update(self, d, r, s):
            return None if self.cid in silent.get(r, ()) else self.inner.update(d, r, s)

    ref = Server(
        make_strategy("fedavg"),
        [client_data(c, 4) for c in range(4)],
        NUM_FEATURES,
        NUM_CLASSES,
        run_config(5, 4, 9),
        client_wrapper=lambda cid, inner: Silent(inner, cid),
    )
    ref.run()
    assert same_state(fk.state, ref.state)
    assert [[c for c, _ in h.failed] for h in fk.history] == [[c for c, _ in h.failed] for h in ref.history]
    assert fk.messages_sent["query.fedkernels_identify"] == 7  # each node once, node 21 again on its return


def test_node_with_other_options_is_refused():
    """A node whose strategy options differ is refused at identify (named option), and its client
    fails "not connected"; the run goes on with the others."""
    ok = apps_grid({10: 0, 11: 1})
    other = apps_grid({12: 2}, strategy=lambda: make_strategy("fedavg").__class__(hidden=(5,)))
    ok.apps.update(other.apps)
    fk = FlowerStrategy(
        make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, 3, run_config(1, 3, 0, timeout=5), startup_grace=0
    )
    fk.start(ok, timeout=5)
    assert fk.nodes.refused[12].startswith("strategy option hidden=[5] on the node, [8] on the server")
    assert fk.history[0].failed == [(2, "not connected")]


def test_identity_mismatch_names_the_field():
    mine = run_identity(make_strategy("fedavg"))
    theirs = json.loads(mine)
    assert identity_mismatch(mine, mine) is None
    assert identity_mismatch(mine, json.dumps({**theirs, "fedkernels": "0.0.1"})).startswith("fedkernels '0.0.1'")
    assert identity_mismatch(mine, "x" * 70000) == "sent no valid run identity"
    assert identity_mismatch(mine, 7) == "sent no valid run identity"


def test_registry_keys_tie_clients_to_nodes():
    reg = NodeRegistry(2, partition_keys={0: b"KEY-A\n", 1: b"KEY-B"})
    reg.claim(0, 5, 0, b"KEY-A", None)
    reg.claim(0, 6, 1, b"KEY-A", None)  # a registered node claiming a client that is not its key's
    reg.claim(0, 7, 1, None, None)
    assert reg.node_of == {0: 5} and "not the one registered for client 1" in reg.refused[6] and 7 in reg.refused


@pytest.mark.parametrize("per_round", [None, 1, 3, 10])
def test_evaluation_sample(per_round):
    got = ev.evaluation_clients(4, 2, 6, per_round)
    assert got == ev.evaluation_clients(4, 2, 6, per_round) and got == sorted(set(got))
    assert len(got) == (6 if per_round is None else min(per_round, 6)) and set(got) <= set(range(6))


def test_window_keeps_few_messages_out_and_loses_none():
    """With a window of 3, never more than 3 messages are out, and all 40 are answered."""
    grid = QueueGrid(workers=2, service=1.0)
    msgs = {n: Message(RecordDict({}), n, "train", group_id="1") for n in range(40)}
    got = exchange(grid, msgs, timeout=3.0, window=3, clock=grid.clock, sleep=grid.sleep)
    assert sorted(got) == list(range(40)) and grid.most == 3


def test_client_refuses_a_server_with_another_identity():
    """A train message whose run-identity digest is not the node's own gets an error reply (the
    node never trains for a server with another fedkernels version or strategy options)."""
    from flwr.app import ConfigRecord

    from fedkernels.integrations.flower import KEY

    grid = apps_grid({10: 0})
    app, ctx = grid.apps[10]
    header = ConfigRecord({"identity": "0" * 64, "round": 0, "seed": 1})
    with pytest.raises(Exception, match="run identity differs"):
        app(Message(RecordDict({KEY: header}), 10, "train", group_id="1"), ctx)


def test_a_killed_run_resumes_to_the_same_state(tmp_path):
    """A FlowerStrategy started again on its checkpoint (as a restarted ServerApp is) goes on from
    the last completed round to the uninterrupted run's state and history; a checkpoint of another
    run (another seed) is refused naming the field."""
    ckpt = tmp_path / "run.ckpt"

    def flower(rounds, seed=9, checkpoint=str(ckpt)):
        cfg = run_config(rounds, 3, seed, timeout=5, checkpoint=checkpoint)
        return FlowerStrategy(make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, 4, cfg, startup_grace=0)

    first = flower(2)
    first.start(apps_grid({10: 0, 11: 1, 12: 2, 13: 3}), timeout=5)
    again = flower(4)
    again.start(apps_grid({20: 0, 21: 1, 22: 2, 23: 3}), timeout=5)  # new nodes, new ids: a new run
    whole = flower(4, checkpoint=None)
    whole.start(apps_grid({10: 0, 11: 1, 12: 2, 13: 3}), timeout=5)
    assert again.resumed_from == 2 and same_state(again.state, whole.state)
    assert [(h.clients, h.failed, h.bytes_up) for h in again.history] == [
        (h.clients, h.failed, h.bytes_up) for h in whole.history
    ]
    with pytest.raises(ValueError, match="seed=9, this run has 10"):
        flower(4, seed=10).start(apps_grid({10: 0, 11: 1, 12: 2, 13: 3}), timeout=5)


def test_stateful_clients_are_refused():
    """Clients that keep tensors between rounds (PartialExchange with keep_unreceived) have nowhere to
    keep them in the adapter: refused at construction, naming why."""
    from fedkernels.fl.algorithms import PartialExchange

    with pytest.raises(NotImplementedError, match="stateful clients"):
        FlowerStrategy(
            PartialExchange(hidden=(8,), keep_unreceived=True), NUM_FEATURES, NUM_CLASSES, 4, run_config(1, 2, 0)
        )


def test_uniform_client_weighting_weighs_as_the_server():
    """``client_weighting="uniform"`` averages the uploads 1/S over the round, as Server does: clients
    of different sizes, so example weights would give another state."""
    from dataclasses import replace

    sizes = (3, 9, 16, 5)
    data = [d.rows(torch.arange(n)) for d, n in zip(tiny_clients(4, per_client=16, seed=3), sizes, strict=True)]
    app = client_app(lambda ctx: make_strategy("fedavg"), lambda ctx: data[int(ctx.node_config["partition-id"])])

    def flower(weighting: str) -> FlowerStrategy:
        cfg = replace(run_config(2, 4, 9, timeout=5), client_weighting=weighting)
        fk = FlowerStrategy(make_strategy("fedavg"), NUM_FEATURES, NUM_CLASSES, 4, cfg, startup_grace=0)
        fk.start(MemoryGrid({10 + c: (app, context(10 + c, c)) for c in range(4)}), timeout=5)
        return fk

    uniform, samples = flower("uniform"), flower("samples")
    ref = Server(
        make_strategy("fedavg"),
        data,
        NUM_FEATURES,
        NUM_CLASSES,
        replace(run_config(2, 4, 9), client_weighting="uniform", batch_clients=False),  # the loop Flower runs
    )
    ref.run()
    assert same_state(uniform.state, ref.state)
    assert not same_state(samples.state, ref.state)
