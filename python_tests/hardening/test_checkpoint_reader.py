"""The checkpoint reader and writer (second hostile sweep): records re-sealed with the project's own
writer but holding wrong types (a TypeError, or accepted: ``metrics="P@1"``), paths that are FIFOs,
``/dev/zero`` or folders, a checkpoint of a run on other data with the same shapes, a live writer's
temp file in another PID namespace, and long runs whose checkpoints could be written but never loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fedkernels.fl import FedAvg
from fedkernels.fl import checkpoint as ck
from fedkernels.fl.round import MAX_REASON_CHARS, failure_reason
from fedkernels.fl.server import record_to_json
from fedkernels.fl.types import RoundRecord
from python_tests.support.checkpoint_tools import reseal
from python_tests.support.fifo import FifoReleaser
from python_tests.support.fl_data import tiny_clients
from python_tests.support.hardening import NUM_CLASSES, NUM_FEATURES, make_server, run_config


@pytest.fixture(scope="module")
def two_rounds(tmp_path_factory) -> bytes:
    """A real 2-round checkpoint's bytes (one run for the whole module)."""
    ckpt = tmp_path_factory.mktemp("ckpt") / "run.ckpt"
    make_server(rounds=2, checkpoint=str(ckpt)).run()
    return ckpt.read_bytes()


@pytest.fixture
def written(tmp_path, two_rounds):
    ckpt = tmp_path / "run.ckpt"
    ckpt.write_bytes(two_rounds)
    return ckpt


def _set(field: str, value: object, i: int = 0):
    def edit(meta: dict) -> dict:
        meta["history"][i][field] = value
        return meta

    return edit


RESEALED = {
    "metrics a string": (_set("metrics", "P@1"), r"history\[0\]\.metrics"),
    "metrics value a string": (_set("metrics", {"P@1": "high"}), r"history\[0\]\.metrics"),
    "metrics value a bool": (_set("metrics", {"P@1": True}), r"history\[0\]\.metrics"),
    "clients strings": (_set("clients", ["a", "b"]), r"history\[0\]\.clients"),
    "clients past num_clients": (_set("clients", [0, 99]), r"history\[0\]\.clients"),
    "clients repeated": (_set("clients", [1, 1, 2]), r"history\[0\]\.clients"),
    "failed not pairs": (_set("failed", [[0, 5]]), r"history\[0\]\.failed"),
    "failed a string": (_set("failed", "client 3"), r"history\[0\]\.failed"),
    "failed client not chosen": (_set("failed", [[4, "crashed"]], 1), r"history\[1\]\.failed"),
    "bytes_up a string": (_set("bytes_up", "12"), r"history\[0\]\.bytes_up"),
    "bytes_down negative": (_set("bytes_down", -1), r"history\[0\]\.bytes_down"),
    "bytes_down a float": (_set("bytes_down", 1.5), r"history\[0\]\.bytes_down"),
    "seconds a string": (_set("seconds", "fast"), r"history\[0\]\.seconds"),
    "seconds negative": (_set("seconds", -2.0), r"history\[0\]\.seconds"),
    "skipped a number": (_set("skipped", 3), r"history\[0\]\.skipped"),
    "round a bool": (_set("round", False), r"history\[0\]\.round"),
    "record with an extra field": (_set("evil", 1), r"history\[0\]' must be a record"),
    "seed a string": (lambda m: {**m, "seed": "5"}, "field 'seed'"),
    "num_clients a list": (lambda m: {**m, "num_clients": [5]}, "field 'num_clients'"),
}


@pytest.mark.parametrize("case", sorted(RESEALED))
def test_resealed_records_with_wrong_types_are_refused_naming_the_field(written, case):
    edit, field = RESEALED[case]
    ckpt = written
    ckpt.write_bytes(reseal(ckpt.read_bytes(), edit))
    with pytest.raises(ValueError, match=f"{ckpt}.*{field}") as e:
        make_server(rounds=3, checkpoint=str(ckpt))
    assert isinstance(e.value, ValueError)


def test_an_honest_reseal_still_loads(written):
    """The reseal itself is not what the reader refuses."""
    ckpt = written
    ckpt.write_bytes(reseal(ckpt.read_bytes(), lambda m: m))
    assert make_server(rounds=3, checkpoint=str(ckpt)).round == 2


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory"])
def test_special_checkpoint_paths_are_refused_by_type(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "run.ckpt"
        os.mkfifo(path)
    elif kind == "dev_zero":
        path = "/dev/zero"
    else:
        path = tmp_path / "run.ckpt"
        path.mkdir()
    want = {"fifo": "a FIFO", "dev_zero": "a character device", "directory": "a directory"}[kind]
    # The releaser unblocks a reader that opened the FIFO (which then fails here, not hangs the run)
    # and tells whether one did; a refusal by type never opens it.
    with FifoReleaser(path) as releaser, pytest.raises(ValueError, match=f"checkpoint {path} is {want}"):
        make_server(rounds=2, checkpoint=str(path))
    assert not releaser.found_a_reader


def test_checkpoint_of_other_data_with_the_same_shapes_is_refused(written):
    ckpt = written
    other = tiny_clients(5, seed=77)  # same sizes, other values
    cfg = run_config(rounds=3, checkpoint=str(ckpt))
    from fedkernels.fl import Server

    with pytest.raises(ValueError, match=f"checkpoint {ckpt} was written for other data"):
        Server(FedAvg(hidden=(8,)), other, NUM_FEATURES, NUM_CLASSES, cfg)
    # the same data still resumes
    assert make_server(rounds=3, checkpoint=str(ckpt)).round == 2


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_live_writer_in_another_pid_namespace_keeps_its_temp_file(tmp_path):
    """A writer in another container has a PID that may be free in ours: its temp file, which it holds
    locked, must survive our cleanup (the PID check alone deleted it); unlocked, it goes."""
    ckpt = tmp_path / "run.ckpt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    temp = tmp_path / f".run.ckpt.tmp-{int(dead.stdout)}"  # a PID that is gone here
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(temp)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        assert ck.clean_stale_temps(ckpt) == [] and temp.exists()
        make_server(rounds=1, checkpoint=str(ckpt)).run()  # a save cleans too
        assert temp.exists()
    finally:
        holder.kill()
        holder.wait()
    assert ck.clean_stale_temps(ckpt) == [temp] and not temp.exists()


def test_failure_reasons_are_bounded():
    e = ValueError("payload has unexpected tensors ['" + "x" * 5000 + "']")
    why = failure_reason(e)
    assert len(why) == MAX_REASON_CHARS and why.startswith("rejected: payload has unexpected")
    assert why.endswith(f"... ({len('rejected: ') + len(str(e))} characters)")


def _hostile_record(i: int, clients: list[int]) -> dict:
    reason = failure_reason(ValueError("payload has unexpected tensors ['" + "a" * 4000 + "']"))
    rec = RoundRecord(i, clients, [(c, reason) for c in clients[:4]], 10**9, 10**9, {"P@1": 0.5, "P@3": 0.25}, 1.5)
    return record_to_json(rec)


def test_a_long_hostile_history_saves_small_and_loads(tmp_path):
    """2,000 rounds, four rejected clients with long reasons each: the header stays small and it loads
    (unbounded, the header would pass the loader's 4 MiB after ~1,100 such rounds, and every later
    save would write a checkpoint that could never be loaded; 10,000 rounds: hardening/test_memory_bound.py)."""
    rounds = 2_000
    s = make_server(rounds=rounds, num_clients=5, clients_per_round=5)
    meta = {"round": rounds, "history": [_hostile_record(i, [0, 1, 2, 3, 4]) for i in range(rounds)], **s._identity()}
    path = tmp_path / "long.ckpt"
    ck.save_checkpoint(path, s.state, meta)
    raw = path.read_bytes()
    header = int.from_bytes(raw[:8], "little")
    assert header < 4096  # the history is not in the header
    per_round = (len(raw) - header) / rounds
    assert per_round < 4 * (MAX_REASON_CHARS + 16) + 256, per_round
    state, got = ck.load_checkpoint(path, s.state)
    assert got["round"] == rounds and got["history"] == json.loads(json.dumps(meta["history"]))
    assert all(torch.equal(state[k], s.state[k]) for k in s.state)


def test_the_writer_refuses_what_the_reader_would_refuse(tmp_path):
    """A checkpoint that would fail to load is never written: the previous one stays."""
    s = make_server(rounds=2, checkpoint=str(tmp_path / "run.ckpt"))
    s.run()
    before = (tmp_path / "run.ckpt").read_bytes()
    bad = {"round": 2, "history": [record_to_json(h) for h in s.history], **s._identity()}
    bad["history"][1]["metrics"] = "P@1"
    with pytest.raises(ValueError, match=r"history\[1\]\.metrics"):
        ck.save_checkpoint(tmp_path / "run.ckpt", s.state, bad)
    huge = {"round": 1, "history": [_hostile_record(0, [0, 1, 2])], **s._identity()}
    huge["history"][0]["skipped"] = "x" * (ck.MAX_RECORD_BYTES * 3)
    with pytest.raises(ValueError, match=r"history of \d+ bytes for 1 rounds"):
        ck.save_checkpoint(tmp_path / "run.ckpt", s.state, huge)
    assert (tmp_path / "run.ckpt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


def test_history_is_not_accepted_in_the_header(written):
    ckpt = written
    from python_tests.support.checkpoint_tools import seal, unpack

    state, meta_json, history = unpack(ckpt.read_bytes())
    meta = json.loads(meta_json)
    meta["history"] = json.loads(history)
    ckpt.write_bytes(seal(state, json.dumps(meta), history))
    with pytest.raises(ValueError, match="field 'history' belongs in the"):
        make_server(rounds=3, checkpoint=str(ckpt))
