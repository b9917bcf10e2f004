"""Checkpoint and resume: written atomically every round, and a run killed mid-way (by an exception
between rounds, or by SIGKILL in the middle of a round) resumes to a bit-identical end."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fedkernels.fl import PayloadError
from fedkernels.fl.faults import FaultInjector
from python_tests.support.hardening import make_server, same_state
from python_tests.support.helpers import child_pythonpath
from python_tests.support.paths import ROOT


def records(history):
    """History without wall-clock times (the only part allowed to differ)."""
    return [dataclasses.replace(h, seconds=0.0) for h in history]


def uninterrupted(**kw):
    s = make_server(**kw)
    s.run()
    return s


class Stop(Exception):
    pass


def test_resume_after_exception_between_rounds(tmp_path):
    ckpt = str(tmp_path / "run.ckpt")
    full = uninterrupted(rounds=5)

    def boom(rec):
        if rec.round == 2:
            raise Stop

    first = make_server(rounds=5, checkpoint=ckpt)
    with pytest.raises(Stop):
        first.run(on_round=boom)
    resumed = make_server(rounds=5, checkpoint=ckpt)
    assert resumed.round == 3 and len(resumed.history) == 3
    resumed.run()
    assert same_state(resumed.state, full.state)
    assert records(resumed.history) == records(full.history)
    assert not [p for p in tmp_path.iterdir() if p.name != "run.ckpt"]  # no temp files left


def test_resume_with_faults_is_bit_identical(tmp_path):
    """Faults are a function of (seed, round, client), so a resumed faulty run fails the same clients."""
    ckpt = str(tmp_path / "run.ckpt")
    kw = dict(rounds=4, wrapper=FaultInjector(crash=0.3, empty=0.2, seed=4))
    full = uninterrupted(**kw)
    a = make_server(checkpoint=ckpt, **{**kw, "rounds": 2})
    a.run()
    b = make_server(checkpoint=ckpt, **kw)
    b.run()
    assert same_state(b.state, full.state) and records(b.history) == records(full.history)
    assert any(h.failed for h in full.history)


CHILD = textwrap.dedent("""
    import sys, time
    from python_tests.support.hardening import make_server, Slow

    def slow_in_round_3(cid, inner):
        class Announce(Slow):
            def update(self, download, round, seed):
                if round == 3:
                    print("in round 3", flush=True)
                    time.sleep(600)  # killed here, mid-round
                return self.inner.update(download, round, seed)
        return Announce(inner, 0.0)

    s = make_server(rounds=5, checkpoint=sys.argv[1], wrapper=slow_in_round_3, batch_clients=False)
    s.run(on_round=lambda rec: print("done", rec.round, flush=True))
""")


def test_resume_after_sigkill_mid_round(tmp_path):
    ckpt = str(tmp_path / "run.ckpt")
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    child = subprocess.Popen([sys.executable, "-c", CHILD, ckpt], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in child.stdout:  # type: ignore[union-attr]
            lines.append(line.strip())
            if line.strip() == "in round 3":
                break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert lines == ["done 0", "done 1", "done 2", "in round 3"] and child.returncode == -signal.SIGKILL
    # the child's wrapped clients run the sequential loop: so do these, for bit-identical states (the
    # batched pass equals it up to float rounding)
    resumed = make_server(rounds=5, checkpoint=ckpt, batch_clients=False)
    assert resumed.round == 3
    resumed.run()
    full = uninterrupted(rounds=5, batch_clients=False)
    assert same_state(resumed.state, full.state) and records(resumed.history) == records(full.history)


def test_failed_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    ckpt = tmp_path / "run.ckpt"
    s = make_server(rounds=3, checkpoint=str(ckpt))
    s.run_round()
    s.save_checkpoint(ckpt)
    good = ckpt.read_bytes()
    s.run_round()

    def dies(*a, **k):
        raise OSError("disk pulled")

    monkeypatch.setattr(os, "replace", dies)
    with pytest.raises(OSError, match="disk pulled"):
        s.save_checkpoint(ckpt)
    monkeypatch.undo()
    assert ckpt.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]
    assert make_server(rounds=3, checkpoint=str(ckpt)).round == 1


def test_checkpoint_of_another_run_is_refused(tmp_path):
    ckpt = str(tmp_path / "run.ckpt")
    make_server(rounds=1, checkpoint=ckpt).run()
    with pytest.raises(ValueError, match="seed=5, this run has 6"):
        make_server(rounds=2, checkpoint=ckpt, seed=6)
    with pytest.raises(ValueError, match="clients_per_round"):
        make_server(rounds=2, checkpoint=ckpt, clients_per_round=2)
    from fedkernels.fl import FedAvg

    with pytest.raises(PayloadError, match="shape"):
        make_server(FedAvg(hidden=(9,)), rounds=2, checkpoint=ckpt)


@pytest.mark.parametrize("corrupt", [lambda b: b[:-3], lambda b: b"\x00" * len(b), lambda b: b[:8] + b"[" + b[9:]])
def test_corrupt_checkpoint_is_refused(tmp_path, corrupt):
    ckpt = tmp_path / "run.ckpt"
    make_server(rounds=1, checkpoint=str(ckpt)).run()
    ckpt.write_bytes(corrupt(ckpt.read_bytes()))
    with pytest.raises(PayloadError):
        make_server(rounds=2, checkpoint=str(ckpt))


def test_checkpoint_is_plain_safetensors_and_json(tmp_path):
    import json

    from safetensors import safe_open

    ckpt = tmp_path / "run.ckpt"
    s = make_server(rounds=2, checkpoint=str(ckpt))
    s.run()
    with safe_open(str(ckpt), "pt") as f:
        meta = json.loads(f.metadata()["fedkernels.checkpoint"])
        assert set(f.keys()) == {*s.state, "fedkernels.history"}  # the history: a uint8 tensor of JSON
        history = json.loads(f.get_tensor("fedkernels.history").numpy().tobytes())
    assert meta["round"] == 2 and meta["seed"] == 5 and len(history) == 2
