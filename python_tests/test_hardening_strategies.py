"""Every registered strategy gets fault tolerance, payload checking and checkpoints for free: a
faulty run equals the survivors-only run, a hostile upload is rejected with the state left to the
honest clients, and a resumed run is bit-identical to an uninterrupted one."""

from __future__ import annotations

import pytest

from fedkernels.fl import payload as pl
from fedkernels.fl.faults import FaultInjector
from fedkernels.fl.registry import strategies
from python_tests.flower_runs import make_strategy
from python_tests.hardening_helpers import SilentWhereFaulty, make_server, same_state, snapshot, tampering

NAMES = sorted(strategies())


def _nan_in_first_float(up: bytes) -> bytes:
    t = pl.decode(up)
    name = next(k for k in sorted(t) if t[k].is_floating_point() and t[k].numel())
    bad = t[name].clone()
    bad.view(-1)[0] = float("nan")
    return pl.encode({**t, name: bad})


@pytest.mark.parametrize("name", NAMES)
def test_faults_equal_survivors_only(name):
    inj = FaultInjector(crash=0.3, empty=0.2, seed=21)
    faulty = make_server(make_strategy(name), wrapper=inj, rounds=3)
    quiet = make_server(make_strategy(name), wrapper=lambda cid, inner: SilentWhereFaulty(inj, cid, inner), rounds=3)
    faulty.run(), quiet.run()
    assert same_state(faulty.state, quiet.state)
    assert sum(len(h.failed) for h in faulty.history) > 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("tamper, reason", [(lambda up: up[:-5], "not valid safetensors"),
                                            (_nan_in_first_float, "NaN or inf")])
def test_hostile_client_rejected(name, tamper, reason):
    honest = make_server(make_strategy(name))
    chosen = honest.select_clients(0)
    liar = chosen[0]
    if tamper is _nan_in_first_float and not any(
            t.is_floating_point() for t in honest.run_client(liar, 0)[0].payload.values()):
        pytest.skip(f"{name} uploads no float tensor (codec bytes): its corrupt-stream rejection is tested in its own suite")
    expect = honest.strategy.aggregate(honest.state, [honest.run_client(c, 0)[0] for c in chosen[1:]], 0)
    s = make_server(make_strategy(name), wrapper=tampering(tamper, {liar}))
    rec = s.run_round()
    assert len(rec.failed) == 1 and rec.failed[0][0] == liar and reason in rec.failed[0][1]
    assert same_state(s.state, expect)
    everyone = make_server(make_strategy(name), wrapper=tampering(tamper, set(range(5))))
    before = snapshot(everyone.state)
    everyone.run_round()
    assert same_state(before, everyone.state)


@pytest.mark.parametrize("name", NAMES)
def test_resume_bit_identical(name, tmp_path):
    ckpt = str(tmp_path / "run.ckpt")
    full = make_server(make_strategy(name), rounds=3)
    full.run()
    make_server(make_strategy(name), rounds=1, checkpoint=ckpt).run()
    resumed = make_server(make_strategy(name), rounds=3, checkpoint=ckpt)
    assert resumed.round == 1
    resumed.run()
    assert same_state(resumed.state, full.state)
