"""Load test of the Flower adapter: N clients, 30% of them faulty every round, every strategy family.

What runs: the real :class:`fedkernels.integrations.flower.FlowerStrategy` under Flower's own
``Strategy.start`` loop on the server side, and the real :func:`client_app` (a Flower ``ClientApp``)
on the client side, exchanging Flower ``Message`` objects. What carries them: :class:`ProcessGrid`,
a Flower ``Grid`` whose clients live in ``--workers`` separate processes (pipes on this machine), not
a SuperLink with one SuperNode per client: 100 SuperNodes are 100 Python + torch processes (tens
of GB and minutes of start-up on a 2-core machine), and Flower's simulation engine needs Ray, which
is not installed here. The deadline is real: a reply that has not arrived when ``timeout`` passes
is dropped, exactly as the SuperLink's ``send_and_receive`` does.

Faults, a pure function of ``(seed, round, client)`` (about 5% each, 30% in all): crash, time-out
(no reply within the deadline), empty upload (``FaultInjector``), garbage bytes, an oversized upload
(over ``max_upload_bytes``) and a bomb (an l1-difference codec stream claiming billions of elements,
or for the other strategies a safetensors header claiming a 1 TB tensor). Every run is checked
against an in-process :class:`fedkernels.fl.Server` run in which the faulty clients send nothing:
the final state must be bit-identical and the failed clients the same.

Used by ``bench/flower_load.py`` (the figures) and ``python_tests/test_flower_load.py`` (the test).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import struct
import time
from pathlib import Path

FAMILIES = ["fedavg", "fedmlh", "fedss", "fedalc", "partialexchange", "l1diff"]
KINDS = ("crash", "timeout", "empty", "garbage", "oversized", "bomb")
FAULT_RATE = 0.30
MAX_UPLOAD = 64 * 1024  # RunConfig.max_upload_bytes of the load runs (the tiny models are a few kB)


def fault_of(seed: int, round: int, client: int) -> str | None:
    """The fault of ``client`` in ``round``: one of KINDS (each FAULT_RATE / 6) or None. The first
    three come from :class:`fedkernels.fl.faults.FaultInjector`, the payload faults from a second draw."""
    from fedkernels.fl.faults import FaultInjector
    from fedkernels.fl.seeding import numpy_rng

    third = FAULT_RATE / 2
    kind = FaultInjector(crash=third / 3, timeout=third / 3, empty=third / 3, seed=seed).fault(round, client)
    if kind is not None:
        return kind
    u = float(numpy_rng(seed, "load-payload-fault", round, client).random())
    return KINDS[3 + int(u * 3 / third)] if u < third else None


def _header_bomb() -> bytes:
    """A safetensors header claiming one 2^40-byte float32 tensor, with no body."""
    hdr = b'{"w":{"dtype":"F32","shape":[274877906944],"data_offsets":[0,1099511627776]}}'
    return struct.pack("<Q", len(hdr)) + hdr


class _Late(Exception):
    """The worker drops this reply (the client 'hangs' past the deadline)."""


class Hostile:
    """A client endpoint that misbehaves where :func:`fault_of` says, honest elsewhere."""

    def __init__(self, inner, client_id: int, seed: int, strategy: str) -> None:
        self.inner, self.client_id, self.seed, self.strategy = inner, client_id, seed, strategy

    def request(self, round: int, seed: int):
        return self.inner.request(round, seed)

    def update(self, download: bytes, round: int, seed: int):
        kind = fault_of(self.seed, round, self.client_id)
        if kind == "crash":
            raise RuntimeError(f"load-test crash of client {self.client_id}")
        if kind == "timeout":
            raise _Late()
        if kind == "empty":
            return None
        up = self.inner.update(download, round, seed)
        if kind == "garbage":
            return b"\x07" * len(up)
        if kind == "oversized":
            return up + b"\0" * MAX_UPLOAD
        if kind == "bomb":
            return _codec_bomb(up) if self.strategy == "l1diff" else _header_bomb()
        return up


def _codec_bomb(upload: bytes) -> bytes:
    """The upload with its first tensor replaced by a 28-byte codec stream claiming 2^33 elements."""
    import torch

    from fedkernels.fl import payload as pl
    from python_tests.fuzz.codec_streams import AUDIT_V1

    tensors = pl.decode(upload)
    name = sorted(tensors)[0]
    bomb = torch.frombuffer(bytearray(AUDIT_V1["audit_28B_shape_2pow33"]), dtype=torch.uint8)
    return pl.encode({**tensors, name: bomb})


# ---- client side: worker processes hosting the Flower ClientApp ---------------------------------------
def _identity() -> None:
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_node_id", "_task_id"):
        setattr(TaskIdentity, attr, 1)


def _worker(conn, strategy: str, num_clients: int, seed: int) -> None:
    """Serve messages for this worker's clients until told to stop: ``(tag, node, type, fields)`` in,
    ``(tag, node, error, fields)`` out (no answer at all for a client that times out)."""
    import torch

    torch.set_num_threads(1)
    from flwr.app import ConfigRecord, Context, Message, RecordDict

    from fedkernels.integrations.flower import KEY, client_app
    from python_tests.flower_runs import client_data, held_out_data, make_strategy

    _identity()
    app = client_app(
        lambda ctx: make_strategy(strategy),
        lambda ctx: client_data(int(ctx.node_config["partition-id"]), num_clients, strategy),
        wrap=lambda ctx, cid, inner: Hostile(inner, cid, seed, strategy),
        load_eval_data=lambda ctx: held_out_data(int(ctx.node_config["partition-id"]), num_clients, strategy),
    )
    for c in range(num_clients):  # load every client's data now: start-up is not round time
        client_data(c, num_clients, strategy)
    w = torch.zeros(1, requires_grad=True)  # the optimizer's lazy imports (seconds) happen here, too
    for opt in (torch.optim.SGD([w], lr=0.1), torch.optim.Adam([w])):
        (w * 2).sum().backward()
        opt.step()
    conn.send("ready")
    contexts: dict[int, Context] = {}
    while True:
        job = conn.recv()
        if job is None:
            return
        tag, node, mtype, fields = job
        ctx = contexts.setdefault(node, Context(1, node, {"partition-id": node - 1000}, RecordDict(), {}))
        msg = Message(RecordDict({KEY: ConfigRecord(fields)}), dst_node_id=node, message_type=mtype, group_id="")
        try:
            reply = app(msg, ctx)
        except _Late:
            continue
        except Exception as e:  # a SuperNode turns a ClientApp exception into an error reply
            conn.send((tag, node, f"{type(e).__name__}: {e}", None))
            continue
        if reply.has_error():
            conn.send((tag, node, reply.error.reason, None))
        else:
            conn.send((tag, node, None, dict(reply.content.config_records[KEY])))


class ProcessGrid:
    """A Flower ``Grid`` over worker processes: node ``1000 + c`` is client ``c``, served by worker
    ``c % workers``. ``send_and_receive`` returns the replies that arrive before ``timeout``."""

    def __init__(self, strategy: str, num_clients: int, seed: int, workers: int = 2) -> None:
        ctx = mp.get_context("spawn")
        self.num_clients, self.tag = num_clients, 0
        self.pipes, self.procs = [], []
        for _ in range(workers):
            here, there = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(there, strategy, num_clients, seed), daemon=True)
            p.start()
            self.pipes.append(here)
            self.procs.append(p)
        for pipe in self.pipes:  # imports done: the deadlines below are about the rounds only
            if pipe.recv() != "ready":
                raise RuntimeError("a load-test worker failed to start")

    def get_node_ids(self) -> list[int]:
        return [1000 + c for c in range(self.num_clients)]

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import ConfigRecord, Error, Message, RecordDict

        from fedkernels.integrations.flower import KEY

        self.tag += 1
        pending = {}
        for m in messages:
            node = m.metadata.dst_node_id
            fields = dict(m.content.config_records[KEY])
            self.pipes[(node - 1000) % len(self.pipes)].send((self.tag, node, m.metadata.message_type, fields))
            pending[node] = m
        replies = []
        end = time.monotonic() + (timeout if timeout is not None else 3600.0)
        while pending and time.monotonic() < end:
            ready = mp.connection.wait(self.pipes, timeout=max(0.0, end - time.monotonic()))
            for pipe in ready:
                tag, node, error, fields = pipe.recv()
                if tag != self.tag or node not in pending:
                    continue  # a late reply to an earlier call: dropped, as past a deadline
                m = pending.pop(node)
                if error is not None:
                    replies.append(Message(Error(code=1, reason=error), reply_to=m))
                else:
                    replies.append(Message(RecordDict({KEY: ConfigRecord(fields)}), reply_to=m))
        return replies

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# ---- one load run and its in-process reference ---------------------------------------------------
def _vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _reset_hwm() -> None:
    with contextlib.suppress(OSError):  # not Linux: VmHWM then counts from process start
        Path("/proc/self/clear_refs").write_text("5")


def run_config(rounds: int, clients: int, seed: int, timeout: float):
    from fedkernels.fl import RunConfig, TrainConfig

    return RunConfig(
        rounds=rounds,
        clients_per_round=clients,
        seed=seed,
        train=TrainConfig(epochs=1, batch_size=16, lr=0.3),
        client_timeout=timeout,
        max_upload_bytes=MAX_UPLOAD,
    )


def flower_run(strategy: str, clients: int, rounds: int, seed: int, timeout: float, workers: int = 2):
    """The Flower run over :class:`ProcessGrid`. Returns (FlowerStrategy, seconds, peak RSS growth MiB)."""
    from fedkernels.integrations.flower import FlowerStrategy
    from python_tests.flower_runs import NUM_CLASSES, NUM_FEATURES, make_strategy

    _identity()
    grid = ProcessGrid(strategy, clients, seed, workers)
    try:
        cfg = run_config(rounds, clients, seed, timeout)
        fk = FlowerStrategy(make_strategy(strategy), NUM_FEATURES, NUM_CLASSES, clients, cfg)
        fk._discover(grid)  # start-up (worker imports) is not part of the rounds' time
        _reset_hwm()
        base = _vm_hwm_kib()
        t0 = time.perf_counter()
        fk.start(grid, fk.initial_arrays(), num_rounds=rounds, timeout=timeout)
        seconds = time.perf_counter() - t0
        peak = (_vm_hwm_kib() - base) / 1024
    finally:
        grid.close()
    return fk, seconds, peak


def reference_run(strategy: str, clients: int, rounds: int, seed: int):
    """The in-process run in which every faulty client sends nothing."""
    from fedkernels.fl import Server
    from python_tests.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, make_strategy

    class Silent:
        def __init__(self, inner, cid):
            self.inner, self.cid = inner, cid

        def request(self, round, seed_):
            return self.inner.request(round, seed_)

        def update(self, download, round, seed_):
            return None if fault_of(seed, round, self.cid) else self.inner.update(download, round, seed_)

    s = Server(
        make_strategy(strategy),
        [client_data(c, clients, strategy) for c in range(clients)],
        NUM_FEATURES,
        NUM_CLASSES,
        run_config(rounds, clients, seed, None),
        client_wrapper=lambda cid, inner: Silent(inner, cid),
    )
    s.run()
    return s


def check(fk, ref) -> None:
    """The Flower run equals the reference: same state bits, same failed clients, every fault seen."""
    import torch

    assert fk.state.keys() == ref.state.keys()
    assert all(fk.state[k].dtype == ref.state[k].dtype and torch.equal(fk.state[k], ref.state[k]) for k in ref.state)
    for got, want in zip(fk.history, ref.history, strict=True):
        assert [c for c, _ in got.failed] == [c for c, _ in want.failed], (got.failed, want.failed)
