"""The l1-difference update under secure aggregation with a public segmentation
(fedkernels.fl.privacy.segments, L1DiffForm(segments_every=K)).

A dense round steps by the exact l1-difference prox of the round's mean gradient (checked against
the slow reference prox), whose runs become the public segments; each of the K - 1 rounds after it
steps by the mean gradient's segment means (checked against a slow per-value loop over the plain
loop's mean gradient), with a masked vector of one value per segment."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.fl import RunConfig, Server, TrainConfig
from fedkernels.fl.algorithms import FedAvg, L1Diff
from fedkernels.fl.algorithms.l1diff import GAMMA
from fedkernels.fl.privacy import DPConfig, PrivacyConfig, PrivateServer
from fedkernels.fl.privacy.forms import SEGMENTS, SEGMENTS_LEFT, L1DiffForm, form_of
from fedkernels.fl.privacy.segments import (
    boundary_mask,
    decode_segments,
    encode_segments,
    expand,
    lengths_of,
    runs_of,
    segment_means,
)
from python_tests.reference.prox_ref import tv1d_slow
from python_tests.reference.segments_ref import expand_slow, runs_slow, segment_means_slow
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data

NUM_CLIENTS, ETA, GAMMA_VALUE = 5, 0.5, 0.02
MODEL = ("0.bias", "0.weight", "2.bias", "2.weight")


def clients():
    return [client_data(i, NUM_CLIENTS) for i in range(NUM_CLIENTS)]


def config(rounds=4, seed=7):
    return RunConfig(rounds=rounds, clients_per_round=4, seed=seed, train=TrainConfig(epochs=1, batch_size=16, lr=0.3))


def l1diff(gamma=GAMMA_VALUE, **kw):
    return L1Diff(gamma=gamma, eta=ETA, hidden=(8,), **kw)


def model(state):
    return {n: state[n] for n in MODEL}


def mean_gradient(state, round):
    """The round's example-weighted mean gradient, from the plain loop's gamma = 0 step (exact FedSGD)."""
    plain = Server(l1diff(gamma=0.0), clients(), NUM_FEATURES, NUM_CLASSES, config())
    plain.state = {n: t.clone() for n, t in model(state).items()}
    plain.round = round
    plain.run_round()
    return {n: (state[n].double() - plain.state[n].double()) / ETA for n in MODEL}


def runs_within(values: np.ndarray, tol: float) -> list[int]:
    """Runs of a float vector whose neighbours differ by more than ``tol`` (the reference prox is exact
    only up to rounding)."""
    out: list[int] = []
    for i in range(len(values)):
        if i > 0 and abs(values[i] - values[i - 1]) <= tol:
            out[-1] += 1
        else:
            out.append(1)
    return out


def test_dense_round_is_the_prox_of_the_mean_gradient_and_its_runs_are_the_segments():
    s = PrivateServer(
        l1diff(), clients(), NUM_FEATURES, NUM_CLASSES, config(), PrivacyConfig(secagg=True, l1diff_segments=3)
    )
    x0 = {n: t.clone() for n, t in model(s.state).items()}
    g = mean_gradient(x0, 0)
    rec = s.run_round()
    assert rec.failed == [] and int(s.state[SEGMENTS_LEFT]) == 2
    fewer = 0
    for n in MODEL:
        ref = tv1d_slow(g[n].reshape(-1).numpy(), GAMMA_VALUE, True)
        step = ((x0[n].double() - s.state[n].double()) / ETA).reshape(-1).numpy()
        np.testing.assert_allclose(step, ref, atol=3e-5, err_msg=n)
        lengths = lengths_of(s.state[SEGMENTS + n])
        assert lengths.tolist() == runs_within(ref, 1e-5), n
        fewer += lengths.numel() < ref.size
    assert fewer >= 2  # gamma makes the larger tensors piecewise constant


def test_segmented_rounds_step_by_the_segment_means_of_the_mean_gradient_then_a_dense_one():
    s = PrivateServer(
        l1diff(), clients(), NUM_FEATURES, NUM_CLASSES, config(), PrivacyConfig(secagg=True, l1diff_segments=3)
    )
    s.run_round()
    dense_up = s.history[0].privacy["secagg_bytes_up"]
    for r in (1, 2):
        x = {n: t.clone() for n, t in model(s.state).items()}
        segs = {n: lengths_of(s.state[SEGMENTS + n]) for n in MODEL}
        g = mean_gradient(x, r)
        rec = s.run_round()
        assert rec.failed == [] and int(s.state[SEGMENTS_LEFT]) == 2 - r
        saved = 0
        for n in MODEL:
            lengths = segs[n].tolist()
            want = expand_slow(segment_means_slow(g[n].reshape(-1).numpy(), lengths), lengths)
            step = ((x[n].double() - s.state[n].double()) / ETA).reshape(-1).numpy()
            np.testing.assert_allclose(step, want, atol=2e-5, err_msg=f"round {r} {n}")
            assert torch.equal(lengths_of(s.state[SEGMENTS + n]), segs[n])  # it holds for K - 1 rounds
            saved += x[n].numel() - len(lengths)
        # the masked vector has one 4-byte ring value per segment (32-bit ring) instead of per weight
        got = dense_up - rec.privacy["secagg_bytes_up"]
        assert abs(got - 4 * saved * len(rec.clients)) <= 32 * len(rec.clients), (got, saved)
    s.run_round()  # the K-th round is dense again and makes a new segmentation
    assert int(s.state[SEGMENTS_LEFT]) == 2 and s.history[3].privacy["secagg_bytes_up"] == pytest.approx(
        dense_up, abs=64
    )


def test_segments_every_0_keeps_the_plain_secure_l1diff():
    """Without segments the round is the clients' own directions averaged (the plain loop's step)."""
    plain = Server(l1diff(), clients(), NUM_FEATURES, NUM_CLASSES, config(2))
    plain.run()
    s = PrivateServer(l1diff(), clients(), NUM_FEATURES, NUM_CLASSES, config(2), PrivacyConfig(secagg=True))
    s.run()
    assert not any(k.startswith(SEGMENTS) for k in s.state)
    for n in MODEL:
        assert torch.allclose(s.state[n], plain.state[n], atol=2e-5, rtol=0), n


@pytest.mark.parametrize("segments", [0, 3])
def test_gamma_rel_under_secagg_sets_the_plain_runs_gamma(segments):
    plain = Server(l1diff(gamma_rel=0.3), clients(), NUM_FEATURES, NUM_CLASSES, config(1))
    plain.run()
    priv = PrivacyConfig(secagg=True, l1diff_segments=segments)
    s = PrivateServer(l1diff(gamma_rel=0.3), clients(), NUM_FEATURES, NUM_CLASSES, config(1), priv)
    s.run()
    assert float(plain.state[GAMMA]) > 0
    assert float(s.state[GAMMA]) == pytest.approx(float(plain.state[GAMMA]), rel=1e-5)


def test_central_dp_segmented_round_is_piecewise_constant_on_the_public_segments():
    priv = PrivacyConfig(dp=DPConfig(10.0, noise=0.0), l1diff_segments=2, noise_seed=1)
    s = PrivateServer(l1diff(), clients(), NUM_FEATURES, NUM_CLASSES, config(), priv)
    s.run_round()
    x = {n: t.clone() for n, t in model(s.state).items()}
    segs = {n: lengths_of(s.state[SEGMENTS + n]) for n in MODEL}
    rec = s.run_round()
    assert rec.failed == [] and int(s.state[SEGMENTS_LEFT]) == 0
    for n in MODEL:
        step = (x[n].double() - s.state[n].double()).reshape(-1)
        means = segment_means(step, segs[n])
        assert torch.allclose(step, expand(means, segs[n]), atol=1e-6), n


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="l1diff_segments must be an integer"):
        PrivacyConfig(secagg=True, l1diff_segments=-1)
    with pytest.raises(ValueError, match="applies to L1Diff only"):
        form_of(FedAvg(), segments_every=2)
    with pytest.raises(ValueError, match="segments_every must be an integer"):
        L1DiffForm(l1diff(), segments_every=-2)
    with pytest.raises(ValueError, match="gamma_rel"):
        PrivateServer(
            l1diff(gamma_rel=0.3),
            clients(),
            NUM_FEATURES,
            NUM_CLASSES,
            config(),
            PrivacyConfig(dp=DPConfig(1.0, noise=1.0)),
        )
    # a run with FedAvg and L1Diff: the segments apply to L1Diff, FedAvg stays whole-model
    s = PrivateServer(
        FedAvg(), clients(), NUM_FEATURES, NUM_CLASSES, config(1), PrivacyConfig(secagg=True, l1diff_segments=3)
    )
    assert type(s.form).__name__ == "DenseForm"


def test_a_download_with_bad_segments_fails_that_client_clearly():
    form = L1DiffForm(l1diff(), segments_every=2)
    s = Server(l1diff(), clients(), NUM_FEATURES, NUM_CLASSES, config(1))
    down = form.download(s.state, 0, 0, 0, None)
    upload = l1diff().client_update(form.local_payload(down, None), clients()[0], config().train, 0, 0)
    wrong_size = encode_segments(torch.tensor([3, 2]))  # 5 values: 0.bias has 8
    garbage = torch.randint(0, 256, (40,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for bad in (wrong_size, garbage, torch.tensor([1.0]), torch.tensor([[1]], dtype=torch.uint8)):
        with pytest.raises(ValueError, match=r"segments of '0\.bias'"):
            form.contribution({**down, "l1.segments.0.bias": bad}, upload, 1.0)


values = st.lists(st.sampled_from([0.0, 1.0, -2.5, 1e30, float("nan")]), max_size=40)


@settings(deadline=None, max_examples=80)
@given(values)
def test_runs_of_matches_the_value_by_value_loop(v):
    got = runs_of(torch.tensor(v, dtype=torch.float64))
    assert got.tolist() == runs_slow(np.array(v, dtype=np.float64))
    assert int(got.sum()) == len(v) and bool((got >= 1).all())


@settings(deadline=None, max_examples=80)
@given(st.lists(st.integers(1, 6), max_size=12), st.integers(0, 2**31 - 1))
def test_segment_means_and_expand_match_the_loops(lengths, seed):
    d = sum(lengths)
    x = torch.randn(d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    lt = torch.tensor(lengths, dtype=torch.int64)
    means = segment_means(x, lt)
    np.testing.assert_allclose(means.numpy(), segment_means_slow(x.numpy(), lengths), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(
        expand(means, lt).numpy(), expand_slow(means.numpy(), lengths) if lengths else np.zeros(0)
    )


@settings(deadline=None, max_examples=80)
@given(st.lists(st.integers(1, 9), max_size=12))
def test_boundary_mask_is_a_fixed_shape_form_of_the_lengths(lengths):
    mask = boundary_mask(torch.tensor(lengths, dtype=torch.int64), sum(lengths))
    assert mask.shape == (sum(lengths),) and mask.dtype == torch.uint8 and int(mask.sum()) == len(lengths)
    assert lengths_of(mask).tolist() == lengths


def test_a_segmented_run_resumes_from_its_checkpoint_as_if_never_stopped(tmp_path):
    """The segmentation is state: a run stopped after its dense round and resumed in a segmented one
    ends where the uninterrupted run ends, bit for bit (fixed-shape entries a checkpoint can hold)."""
    priv = PrivacyConfig(secagg=True, l1diff_segments=3)

    def server(rounds, path):
        cfg = config(rounds) if path is None else dataclasses.replace(config(rounds), checkpoint=str(path))
        return PrivateServer(l1diff(), clients(), NUM_FEATURES, NUM_CLASSES, cfg, priv)

    whole = server(4, None)
    whole.run()
    server(2, tmp_path / "ck").run()
    resumed = server(4, tmp_path / "ck")
    assert resumed.round == 2 and int(resumed.state[SEGMENTS_LEFT]) == 1  # round 2 will be a segmented one
    resumed.run()
    assert resumed.state.keys() == whole.state.keys()
    for k, v in whole.state.items():
        assert torch.equal(resumed.state[k], v), k


@settings(deadline=None, max_examples=80)
@given(st.lists(st.integers(1, 70000), min_size=1, max_size=10))
def test_segments_round_trip_through_their_wire_form(lengths):
    """Long runs included (Elias-gamma codes of many bits); about 2 bytes and a length code a segment."""
    wire = encode_segments(torch.tensor(lengths))
    assert decode_segments(wire, sum(lengths), "w").tolist() == lengths
    assert wire.numel() <= 40 + 2 * len(lengths) + sum(2 * n.bit_length() for n in lengths) // 8 + 1
    with pytest.raises(ValueError, match="segments of 'w'"):
        decode_segments(wire, sum(lengths) + 1, "w")
