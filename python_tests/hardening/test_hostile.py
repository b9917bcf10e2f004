"""Hostile clients through the Server: each malformed upload is rejected for that client with a clear
reason, and the global state is what the honest clients alone give (untouched if none is honest)."""

from __future__ import annotations

import os
import pickle
import re

import pytest
import torch

from fedkernels.fl import FedAvg
from fedkernels.fl import payload as pl
from python_tests.support.hardening import SparseRows, edit_tensors, make_server, same_state, snapshot, tampering


def _set(name, value_fn):
    return edit_tensors(lambda t: {**t, name: value_fn(t[name])})


def _nan_first(x):
    x = x.clone()
    x.view(-1)[0] = float("nan")
    return x


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch /tmp/fedkernels-hostile-pwned",))


# (strategy, tamper, reason fragment): every case of the issue, against FedAvg (dense state) and
# SparseRows (ids + rows, to test id ranges and lengths that must match).
CASES = {
    "wrong name": (
        FedAvg,
        edit_tensors(lambda t: {("x" + k if k == "0.weight" else k): v for k, v in t.items()}),
        r"lacks tensors \['0.weight'\]",
    ),
    "extra name": (FedAvg, edit_tensors(lambda t: {**t, "backdoor": torch.ones(3)}), "unexpected tensors"),
    "wrong shape": (FedAvg, _set("0.weight", lambda w: w[:, :-1].contiguous()), "'0.weight' has shape"),
    "wrong dtype": (FedAvg, _set("0.bias", lambda b: b.double()), "'0.bias' has dtype torch.float64"),
    "NaN": (FedAvg, _set("2.weight", _nan_first), "'2.weight' has NaN or inf"),
    "inf": (FedAvg, _set("2.bias", lambda b: b + float("inf")), "'2.bias' has NaN or inf"),
    "arbitrary bytes": (FedAvg, lambda up: os.urandom(len(up)), "not valid safetensors"),
    "truncated": (FedAvg, lambda up: up[: len(up) // 2], "not valid safetensors"),
    "pickle": (FedAvg, lambda up: pickle.dumps({"w": Exploit()}), "not valid safetensors"),
    "oversize": (FedAvg, lambda up: up + bytes(1 << 20), "exceeds the limit"),
    "id too large": (
        SparseRows,
        _set("ids", lambda i: torch.where(i == i.max(), torch.tensor(2**40), i)),
        "'ids' has values >= 8",
    ),
    "negative id": (
        SparseRows,
        _set("ids", lambda i: torch.where(i == i.min(), torch.tensor(-1), i)),
        "'ids' has values below 0",
    ),
    "repeated ids": (SparseRows, _set("ids", lambda i: torch.full_like(i, int(i[0]))), "'ids' has repeated values"),
    "ids vs rows": (SparseRows, _set("rows", lambda r: torch.cat([r, r[:1]])), "has n = "),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_upload_rejected(case):
    strategy_cls, tamper, reason = CASES[case]
    bad = {0, 1, 2, 3, 4}
    strategy = strategy_cls(hidden=(8,)) if strategy_cls is FedAvg else strategy_cls()
    s = make_server(strategy, wrapper=tampering(tamper, bad), max_upload_bytes=1 << 20)
    before = snapshot(s.state)
    rec = s.run_round()
    assert [c for c, _ in rec.failed] == rec.clients
    for _, why in rec.failed:
        assert why.startswith("rejected: ") and re.search(reason, why), why
    assert same_state(before, s.state)
    assert not os.path.exists("/tmp/fedkernels-hostile-pwned")


@pytest.mark.parametrize("strategy_cls", [FedAvg, SparseRows])
def test_honest_clients_still_count(strategy_cls):
    """One hostile client among honest ones: the new state is the aggregate of the honest uploads."""
    make = (lambda: strategy_cls(hidden=(8,))) if strategy_cls is FedAvg else strategy_cls
    honest = make_server(make())
    chosen = honest.select_clients(0)
    liar = chosen[1]
    expect = honest.strategy.aggregate(honest.state, [honest.run_client(c, 0)[0] for c in chosen if c != liar], 0)
    s = make_server(make(), wrapper=tampering(lambda up: b"\x00" * 64, {liar}))
    rec = s.run_round()
    assert [c for c, _ in rec.failed] == [liar]
    assert same_state(s.state, expect)


def test_bad_request_rejected():
    """A strategy that takes requests: a request off its spec fails that client before any download."""

    class Asking(SparseRows):
        def client_request(self, data, round, seed):
            return {"want": torch.unique(data.indices)}

        def request_spec(self, state):
            return pl.PayloadSpec(
                {"want": pl.TensorSpec(torch.int64, (None,), min_value=0, max_value=state["W"].shape[0])}
            )

    class BadAsk:
        def __init__(self, inner):
            self.inner = inner

        def request(self, round, seed):
            return pl.encode({"want": torch.tensor([3, 99])})

        def update(self, download, round, seed):
            raise AssertionError("must not be reached: the request was rejected")

    s = make_server(
        Asking(), wrapper=lambda cid, inner: BadAsk(inner) if cid == 0 else inner, num_clients=3, clients_per_round=3
    )
    rec = s.run_round()
    assert rec.failed == [(0, "rejected: tensor 'want' has values >= 8")]
