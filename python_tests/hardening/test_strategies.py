"""Every registered strategy gets fault tolerance, payload checking and checkpoints for free: a
faulty run equals the survivors-only run, a hostile upload is rejected with the state left to the
honest clients, and a resumed run is bit-identical to an uninterrupted one."""

from __future__ import annotations

import re

import pytest
import torch

from fedkernels.fl import payload as pl
from fedkernels.fl.faults import FaultInjector
from fedkernels.fl.registry import strategies
from python_tests.support.flower_runs import make_strategy
from python_tests.support.hardening import SilentWhereFaulty, make_server, same_state, snapshot, tampering

NAMES = sorted(strategies())


def _poison_first_tensor(up: bytes) -> bytes:
    """A well-formed payload whose content is bad: NaN in the first float tensor, or, for uploads of
    codec bytes only (the l1-difference strategies), a cut codec stream. Both pass the safetensors
    parse; the first fails the spec's finiteness check, the second the strategy's check_upload."""
    t = pl.decode(up)
    floats = [k for k in sorted(t) if t[k].is_floating_point() and t[k].numel()]
    if floats:
        bad = t[floats[0]].clone()
        bad.view(-1)[0] = float("nan")
        return pl.encode({**t, floats[0]: bad})
    name = next(k for k in sorted(t) if t[k].dtype == torch.uint8 and t[k].numel() > 4)
    return pl.encode({**t, name: t[name][:-3].clone()})


@pytest.mark.parametrize("name", NAMES)
def test_faults_equal_survivors_only(name):
    inj = FaultInjector(crash=0.3, empty=0.2, seed=21)
    faulty = make_server(make_strategy(name), wrapper=inj, rounds=3)
    quiet = make_server(make_strategy(name), wrapper=lambda cid, inner: SilentWhereFaulty(inj, cid, inner), rounds=3)
    faulty.run(), quiet.run()
    assert same_state(faulty.state, quiet.state)
    assert sum(len(h.failed) for h in faulty.history) > 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "tamper, reason",
    [
        (lambda up: up[:-5], "not valid safetensors"),
        (_poison_first_tensor, "NaN or inf|not a valid l1-difference stream"),
    ],
)
def test_hostile_client_rejected(name, tamper, reason):
    honest = make_server(make_strategy(name))
    chosen = honest.select_clients(0)
    liar = chosen[0]
    expect = honest.strategy.aggregate(honest.state, [honest.run_client(c, 0)[0] for c in chosen[1:]], 0)
    s = make_server(make_strategy(name), wrapper=tampering(tamper, {liar}))
    rec = s.run_round()
    assert len(rec.failed) == 1 and rec.failed[0][0] == liar and re.search(reason, rec.failed[0][1]), rec.failed
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
