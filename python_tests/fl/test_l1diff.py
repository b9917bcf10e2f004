"""The l1-difference strategies in the loop: round trips, byte accounting, reproducibility, aggregation."""

from __future__ import annotations

import pytest
import torch

import fedkernels
from fedkernels.comm import decode_runs, encode_runs
from fedkernels.fl import PayloadError, RunConfig, Server, TrainConfig, decode, encode
from fedkernels.fl.algorithms import L1Diff, L1DiffNetwork
from fedkernels.fl.algorithms.fedavg import multilabel_loss
from fedkernels.fl.algorithms.l1diff_codec import full_gradient, l1diff_direction
from fedkernels.fl.algorithms.l1diff_network import EDGES, GAP
from fedkernels.fl.models import load_state, mlp
from fedkernels.fl.round import client_seed
from fedkernels.fl.strategy import SERVER
from python_tests.support.fl_data import assert_training_improves, tiny_clients


def _cfg(seed=0, rounds=3):
    return RunConfig(rounds=rounds, clients_per_round=2, train=TrainConfig(epochs=1, batch_size=16, lr=0.3), seed=seed)


def _server(seed=0, rounds=3, **kw):
    return Server(L1Diff(hidden=(8,), **{"gamma": 0.01, "eta": 0.5, **kw}), tiny_clients(4), 16, 8, _cfg(seed, rounds))


def _net_server(seed=0, rounds=3, **kw):
    strat = L1DiffNetwork(4, **{"gamma": 0.01, "eta": 0.5, "lam": 0.05, "k": 2, "hidden": (8,), **kw})
    return Server(strat, tiny_clients(4), 16, 8, _cfg(seed, rounds))


@pytest.mark.parametrize("make", [_server, _net_server])
def test_round_trip_and_bytes(make):
    s = make()
    chosen = s.select_clients(0)
    results, downs = zip(*[s.run_client(c, 0) for c in chosen], strict=True)
    for c, res, down in zip(chosen, results, downs, strict=True):
        seed = client_seed(s.config.seed, 0, c)
        payload_down = s.strategy.client_payload(s.state, c, None, 0, seed)
        assert down == len(encode(payload_down))
        # what the loop counted is the serialised upload (res.payload is check_upload's decoded form)
        assert res.bytes_up == len(s.endpoints[c].update(encode(payload_down), 0, seed))
    s2 = make()
    rec = s2.run_round()
    assert not rec.failed and rec.bytes_up == sum(r.bytes_up for r in results)


def test_update_is_the_prox_step_and_compresses():
    s = _server(gamma=0.05)
    data = s.clients[0]
    payload = dict(s.state)
    up = s.strategy.client_update(payload, data, s.config.train, 0, 0)
    model = load_state(mlp(16, 8, (8,)), payload)
    params = [p for _, p in model.named_parameters()]
    grads = full_gradient(params, lambda b: multilabel_loss(model(b.x), b, "bce"), data, 16)
    dense = 0
    for (name, _), g in zip(model.named_parameters(), grads, strict=True):
        got = decode_runs(up[name].numpy().tobytes())
        want = -fedkernels.prox_tv1d(-0.5 * g.reshape(-1), 0.5 * 0.05).reshape(g.shape) / 0.5
        assert torch.equal(got, want)
        dense += 4 * g.numel()
    assert sum(t.numel() for t in up.values()) < dense  # fewer bytes than the dense float32 update


def test_gamma_zero_is_fedsgd():
    _server(gamma=0.0)  # an accepted setting: the server builds
    g = torch.randn(5, 3)
    assert torch.equal(l1diff_direction(g, 0.0, 0.5), g)


class _Raw:
    """A client's upload as the wire carried it (codec streams), for an independent decode."""

    def __init__(self, client_id: int, payload: dict) -> None:
        self.client_id, self.payload = client_id, payload


def _round_zero_uploads(s):
    """Round 0's clients' raw uploads (codec streams), their sample counts, and the aggregate of the
    loop's checked uploads."""
    ups = [s.run_client(c, 0)[0] for c in s.select_clients(0)]
    raws = []
    for u in ups:
        seed = client_seed(s.config.seed, 0, u.client_id)
        down = encode(s.strategy.client_payload(s.state, u.client_id, None, 0, seed))
        raws.append(_Raw(u.client_id, decode(s.endpoints[u.client_id].update(down, 0, seed))))
    return raws, [len(s.clients[u.client_id]) for u in ups], s.strategy.aggregate(s.state, ups, 0)


def _final_state(make, seed):
    s = make(seed=seed)
    s.run()
    return s.state


@pytest.mark.parametrize("make", [_server, _net_server])
def test_same_seed_bit_identical(make):
    first, again, other = (_final_state(make, seed) for seed in (3, 3, 4))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert any(not torch.equal(first[k], other[k]) for k in first)


def test_aggregation_matches_hand_computed():
    s = _server()
    ups, w, new = _round_zero_uploads(s)
    for k in new:
        ds = [decode_runs(u.payload[k].numpy().tobytes()).double() for u in ups]
        want = s.state[k].double() - 0.5 * sum(wi * d for wi, d in zip(w, ds, strict=True)) / sum(w)
        torch.testing.assert_close(new[k].double(), want, rtol=1e-6, atol=1e-7)


def test_network_aggregation_matches_hand_computed():
    s = _net_server(lam=0.2, p=2)
    ups, w, new = _round_zero_uploads(s)
    chosen = [u.client_id for u in ups]
    heads = [n for n in s.state if n.startswith("personal.")]
    for k in (k for k in s.state if not k.startswith(SERVER)):  # the graph and the gap are server-side
        ds = [decode_runs(u.payload[k].numpy().tobytes()).double() for u in ups]
        if k in heads:
            continue
        want = s.state[k].double() - 0.5 * sum(wi * d for wi, d in zip(w, ds, strict=True)) / sum(w)
        torch.testing.assert_close(new[k].double(), want, rtol=1e-6, atol=1e-7)
    # heads: own step for participants, then the graph prox over all clients
    y = []
    for k in heads:
        h = s.state[k].double().clone()
        for c, u in zip(chosen, ups, strict=True):
            h[c] -= 0.5 * decode_runs(u.payload[k].numpy().tobytes()).double()
        y.append(h.reshape(4, -1))
    y = torch.cat(y, 1)
    ref = fedkernels.graph_prox(y, s.state[EDGES], 0.5 * 0.2, 2, tol=1e-12)
    got = torch.cat([new[k].double().reshape(4, -1) for k in heads], 1)
    assert 0 <= float(new[GAP]) <= 1e-6 * max(1.0, ref.primal)  # -1 until a prox ran
    torch.testing.assert_close(got, ref.z, rtol=0, atol=1e-3)


def test_training_improves_precision():
    s = _server(rounds=30, eta=2.0, gamma=0.001)
    assert_training_improves(s, 0.05)


@pytest.mark.parametrize("cut", [3, 1])
def test_corrupt_stream_is_rejected_by_the_loop(cut):
    """A codec stream that parses as a uint8 tensor but does not decode is rejected before
    aggregation and recorded in RoundRecord.failed; the state is the honest clients' aggregate."""
    honest = _server()
    chosen = honest.select_clients(0)
    liar = chosen[0]
    expect = honest.strategy.aggregate(honest.state, [honest.run_client(c, 0)[0] for c in chosen[1:]], 0)
    s = _server()
    inner = s.endpoints[liar]

    class Cutting:
        def request(self, round, seed):
            return inner.request(round, seed)

        def update(self, raw_down, round, seed):
            up = decode(inner.update(raw_down, round, seed))
            name = sorted(up)[0]
            return encode({**up, name: up[name][:-cut].clone()})

    s.endpoints[liar] = Cutting()
    rec = s.run_round()
    assert [c for c, _ in rec.failed] == [liar]
    assert rec.failed[0][1].startswith("rejected: tensor ") and "not a valid l1-difference stream" in rec.failed[0][1]
    assert all(torch.equal(s.state[k], expect[k]) for k in expect)


def _hostile_streams(shape: torch.Size) -> dict[str, bytes]:
    """Streams a hostile client could send for a tensor of ``shape``: each must be rejected."""
    from python_tests.fuzz.codec_streams import AUDIT_V1, stream, v2

    wrong = torch.zeros(shape).reshape(-1)[:-1] if torch.Size(shape).numel() else torch.zeros(1)
    return {
        "bomb": v2(AUDIT_V1["audit_35B_bias_bomb"]),  # 600e6 elements claimed
        "audit_literal": AUDIT_V1["audit_28B_shape_2pow33"],  # version 1
        "numel_2pow64": v2(AUDIT_V1["audit_36B_numel_2pow64"]),
        "zero_beside_huge": v2(AUDIT_V1["audit_zero_beside_huge"]),
        "wrong_shape": encode_runs(wrong),
        "float16": encode_runs(torch.zeros(shape), "float16"),  # the strategy sends float32 values
        "nan": encode_runs(torch.full(shape, float("nan"))),
        "bit_flip": bytes([b ^ (i == 9) for i, b in enumerate(encode_runs(torch.ones(shape)))]),
        "liar": stream(list(shape), 1, b"\x00\x00\x80\x3f", b"\x80"),  # one run of length 1
    }


@pytest.mark.parametrize(
    "kind",
    ["bomb", "audit_literal", "numel_2pow64", "zero_beside_huge", "wrong_shape", "float16", "nan", "bit_flip", "liar"],
)
def test_hostile_streams_are_rejected_not_crashed(kind):
    """The server decodes each tensor against its expected shape and value dtype before allocating:
    a hostile stream for the bias is recorded as "rejected: ..." (never "crashed"), and the state is
    the honest clients' aggregate."""
    honest = _server()
    chosen = honest.select_clients(0)
    liar = chosen[0]
    expect = honest.strategy.aggregate(honest.state, [honest.run_client(c, 0)[0] for c in chosen[1:]], 0)
    s = _server()
    inner = s.endpoints[liar]
    bias = next(n for n in s.state if n.endswith("bias"))
    bad = _hostile_streams(s.state[bias].shape)[kind]

    class Hostile:
        def request(self, round, seed):
            return inner.request(round, seed)

        def update(self, raw_down, round, seed):
            up = decode(inner.update(raw_down, round, seed))
            return encode({**up, bias: torch.frombuffer(bytearray(bad), dtype=torch.uint8)})

    s.endpoints[liar] = Hostile()
    rec = s.run_round()
    assert [c for c, _ in rec.failed] == [liar]
    why = rec.failed[0][1]
    assert why.startswith(f"rejected: tensor {bias!r} is not a valid l1-difference stream: data "), why
    assert all(torch.equal(s.state[k], expect[k]) for k in expect)


def test_float16_strategy_expects_float16_streams():
    s = _server(value_dtype="float16")
    rec = s.run_round()
    assert not rec.failed
    with pytest.raises(PayloadError, match="holds float32 values, expected float16"):
        s.strategy.check_upload(
            s.state,
            {},
            {n: torch.frombuffer(bytearray(encode_runs(t.float())), dtype=torch.uint8) for n, t in s.state.items()},
        )


def test_check_upload_returns_the_decoded_directions():
    """check_upload is the content check and the decode: it returns float32 directions equal to an
    independent decode, and raises PayloadError on a cut stream, so aggregate never sees bytes."""
    from fedkernels.fl.algorithms.l1diff_codec import decode_upload

    s = _server()
    raw = decode(s.endpoints[0].update(encode(s.strategy.client_payload(s.state, 0, None, 0, 1)), 0, 1))
    checked = s.strategy.check_upload(s.state, {}, raw)
    want = decode_upload(raw, {n: t.shape for n, t in s.state.items()})
    assert checked.keys() == want.keys() and all(torch.equal(checked[n], want[n]) for n in want)
    assert all(t.dtype == torch.float32 for t in checked.values())
    name = next(iter(raw))
    with pytest.raises(PayloadError, match="not a valid l1-difference stream"):
        s.strategy.check_upload(s.state, {}, {**raw, name: raw[name][:-3].clone()})


@pytest.mark.parametrize("make", [_server, _net_server])
def test_each_stream_decoded_once_per_round(make, monkeypatch):
    """check_upload decodes every stream and aggregate decodes nothing: one decode per stream per
    round, and the run equals one that decodes each stream independently."""
    from fedkernels.fl.algorithms import l1diff_codec

    fresh = make()
    shapes = getattr(fresh.strategy, "_direction_shapes", lambda st: {k: t.shape for k, t in st.items()})
    fresh.strategy.check_upload = lambda state, sent, up, request=None: l1diff_codec.decode_upload(up, shapes(state))
    fresh.run_round()
    calls = []
    real = l1diff_codec.decode_direction
    monkeypatch.setattr(l1diff_codec, "decode_direction", lambda *a: calls.append(1) or real(*a))
    s = make()
    streams = 2 * sum(not k.startswith(SERVER) for k in s.state)  # two clients per round, one stream per model tensor
    rec = s.run_round()
    assert not rec.failed and len(calls) == streams
    assert all(torch.equal(s.state[k], fresh.state[k]) for k in s.state)


def test_bad_config():
    with pytest.raises(ValueError, match="gamma"):
        L1Diff(gamma=-1.0)
    with pytest.raises(ValueError, match="num_clients"):
        L1DiffNetwork(1)
    with pytest.raises(ValueError, match="graph"):
        L1DiffNetwork(4, graph="nope")
