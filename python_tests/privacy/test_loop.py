"""Private rounds (fedkernels.fl.privacy.PrivateServer) against the plain loop: every algorithm under
SecAgg+ ends where the plain Server ends (within the fixed-point bound); dropouts; central and
distributed DP: clipping bounds a hostile client, the noise has the calibrated std, epsilon is
dp-accounting's for the same (q, sigma, rounds)."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
dp_accounting = pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

import torch  # noqa: E402

from fedkernels.fl import Server, TrainConfig  # noqa: E402
from fedkernels.fl import payload as pl  # noqa: E402
from fedkernels.fl.privacy import DPConfig, PrivacyConfig, PrivateServer  # noqa: E402
from fedkernels.fl.registry import strategies  # noqa: E402
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, make_strategy  # noqa: E402
from python_tests.support.private_runs import NUM_CLIENTS, clients_for, config  # noqa: E402

# no private form: L1DiffNetwork (server-held heads) and LabelPrior (label counts, no model update)
SECURE = sorted(n for n in strategies() if n not in ("l1diffnetwork", "labelprior"))


@pytest.mark.parametrize("name", SECURE)
def test_secagg_run_matches_the_plain_run(name):
    """Two rounds of 4 of 5 clients: the SecAgg+ state equals the plain Server's within the fixed-point
    error (32-bit ring, bound 4: a step of 2^-26 at 4 clients, so rounding moves a mean by < 3e-8) plus
    float32 rounding of the two orders of summation."""
    plain = Server(make_strategy(name), clients_for(name), NUM_FEATURES, NUM_CLASSES, config(1))
    plain.run()
    secure = PrivateServer(
        make_strategy(name), clients_for(name), NUM_FEATURES, NUM_CLASSES, config(1), PrivacyConfig(secagg=True)
    )
    secure.run()
    assert [r.failed for r in secure.history] == [[]]
    for k, v in plain.state.items():
        assert torch.allclose(secure.state[k].double(), v.double(), atol=2e-5, rtol=0), k
    assert all(r.privacy["secagg_bytes_up"] > 0 for r in secure.history)


def test_fedss_row_set_is_the_private_union_of_the_requests():
    name = "fedss"
    s = PrivateServer(
        make_strategy(name), clients_for(name), NUM_FEATURES, NUM_CLASSES, config(1), PrivacyConfig(secagg=True)
    )
    rec = s.run_round()
    strat = make_strategy(name)
    union = set()
    for c in rec.clients:
        seed = __import__("fedkernels.fl.round", fromlist=["client_seed"]).client_seed(7, 0, c)
        union |= set(strat.client_request(s.clients[c], 0, seed)["class_ids"].tolist())
    assert rec.privacy["round_rows"] == len(union)


class DropAt:
    """Fails one client's answer to one message kind (e.g. ``upd/masked``) in one round."""

    def __init__(self, inner, kind, round=0):
        self.inner, self.kind, self.round = inner, kind, round

    def handle(self, kind, round, seed, message):
        if kind == self.kind and round == self.round:
            raise ConnectionError(f"dropped at {kind}")
        return self.inner.handle(kind, round, seed, message)


class Crash:
    def __init__(self, inner):
        self.inner = inner

    def request(self, round, seed):
        return self.inner.request(round, seed)

    def update(self, download, round, seed):
        if round == 0:
            raise ConnectionError("gone")
        return self.inner.update(download, round, seed)


def test_dropout_before_masking_equals_a_plain_crash_and_after_it_counts():
    """A client that drops before its masked input is failed and the state equals the plain run
    where it crashed; one that drops at the unmask stage is summed (its seed is rebuilt from its
    neighbours' shares), so it is not failed and the state equals the plain run of all."""
    name, victim = "fedavg", None
    base = Server(make_strategy(name), clients_for(name), NUM_FEATURES, NUM_CLASSES, config(1))
    victim = base.select_clients(0)[1]
    crash = Server(
        make_strategy(name),
        clients_for(name),
        NUM_FEATURES,
        NUM_CLASSES,
        config(1),
        client_wrapper=lambda c, e: Crash(e) if c == victim else e,
    )
    crash.run()
    base.run()
    for kind, ref in (("upd/masked", crash), ("upd/unmask", base)):
        s = PrivateServer(
            make_strategy(name),
            clients_for(name),
            NUM_FEATURES,
            NUM_CLASSES,
            config(1),
            PrivacyConfig(secagg=True),
            client_wrapper=lambda c, e, kind=kind: DropAt(e, kind) if c == victim else e,
        )
        rec = s.run_round()
        if ref is crash:
            assert [c for c, _ in rec.failed] == [victim] and kind in rec.failed[0][1]
        else:
            assert rec.failed == [] and rec.privacy["survivors"] == 4
        for k, v in ref.state.items():
            assert torch.allclose(s.state[k], v, atol=2e-5, rtol=0), (kind, k)


def test_more_dropouts_than_tolerated_skip_the_round_with_the_reason():
    name = "fedavg"
    priv = PrivacyConfig(secagg=True, max_dropouts=1)  # 4 clients: complete graph k = 3, threshold 2
    s = PrivateServer(
        make_strategy(name),
        clients_for(name),
        NUM_FEATURES,
        NUM_CLASSES,
        config(1),
        priv,
        client_wrapper=lambda c, e: DropAt(e, "upd/unmask") if c in s_chosen[:2] else e,
    )
    before = {k: v.clone() for k, v in s.state.items()}
    rec = s.run_round()
    assert "cannot unmask" in rec.skipped and len(rec.failed) == 2
    assert all(torch.equal(before[k], s.state[k]) for k in before)


s_chosen = Server(make_strategy("fedavg"), clients_for("fedavg"), NUM_FEATURES, NUM_CLASSES, config(1)).select_clients(
    0
)


class Hostile:
    """Answers the train message with a contribution of norm ~1e6 (central DP: the server clips it)."""

    def __init__(self, inner):
        self.inner = inner

    def handle(self, kind, round, seed, message):
        reply = pl.decode(self.inner.handle(kind, round, seed, message))
        return pl.encode(
            {n: torch.full_like(t, 1e6 / math.sqrt(sum(v.numel() for v in reply.values()))) for n, t in reply.items()}
        )


def _dp_server(wrapper=None, noise=0.0, secagg=False, clip=0.5, per_round=4):
    priv = PrivacyConfig(secagg=secagg, dp=DPConfig(clip, noise=noise), noise_seed=123)
    return PrivateServer(
        make_strategy("fedavg"),
        clients_for("fedavg"),
        NUM_FEATURES,
        NUM_CLASSES,
        config(1, per_round),
        priv,
        client_wrapper=wrapper,
    )


def test_clipping_bounds_a_hostile_clients_influence():
    honest = _dp_server()
    rec = honest.run_round()
    hostile_id = rec.clients[0]
    evil = _dp_server(lambda c, e: Hostile(e) if c == hostile_id else e)
    evil.run_round()
    den = honest.q * NUM_CLIENTS
    moved = math.sqrt(sum(float((evil.state[k] - honest.state[k]).double().pow(2).sum()) for k in honest.state))
    assert 0 < moved <= 2 * 0.5 / den + 1e-5  # replacing one clipped update: at most 2 C / (q N)


@pytest.mark.parametrize("secagg", [False, True])
def test_noise_std_matches_the_calibration(secagg):
    """Every client contributes zero, so the model moves by the noise / (q N) alone; its std over the
    ~700 model coordinates is within 12% of sigma C / (q N) (central), or of sigma C sqrt(m / (m - t))
    / (q N) (distributed: each of m clients adds a share with t dropouts allowed for). 12% is more
    than 4 standard errors of a sample std over 700 normal values (2.7%)."""
    sigma, clip = 2.0, 0.5
    s = _dp_server(noise=sigma, secagg=secagg, clip=clip, per_round=5)
    real = s.form.contribution
    s.form.contribution = lambda *a, **k: {n: torch.zeros_like(t) for n, t in real(*a, **k).items()}
    before = {k: v.clone() for k, v in s.state.items()}
    rec = s.run_round()
    assert not rec.failed and not rec.skipped
    moved = torch.cat([(s.state[k] - before[k]).double().reshape(-1) for k in before])
    want = sigma * clip / (s.q * NUM_CLIENTS)
    if secagg:
        m = len(rec.clients)
        want *= math.sqrt(m / (m - s.privacy.dropouts_for(m)))
    assert abs(moved.std().item() / want - 1) < 0.12


def test_reported_epsilon_is_dp_accountings_for_the_same_q_sigma_rounds():
    s = _dp_server(noise=1.3)
    s.config.rounds = 3
    s.run()
    for r, rec in enumerate(s.history):
        acc = dp_accounting.rdp.RdpAccountant()
        acc.compose(dp_accounting.PoissonSampledDpEvent(0.8, dp_accounting.GaussianDpEvent(1.3)), r + 1)
        assert rec.privacy["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
        assert rec.privacy["delta"] == 1e-5 and rec.privacy["noise_multiplier"] == 1.3


def test_target_epsilon_calibrates_sigma_within_budget():
    priv = PrivacyConfig(dp=DPConfig(0.5, target_epsilon=8.0), noise_seed=1)
    s = PrivateServer(make_strategy("fedavg"), clients_for("fedavg"), NUM_FEATURES, NUM_CLASSES, config(3), priv)
    s.run()
    eps = s.history[-1].privacy["epsilon"]
    assert eps <= 8.0 and eps == pytest.approx(8.0, rel=2e-3)
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.8, dp_accounting.GaussianDpEvent(s.sigma * 0.99)), 3)
    assert acc.get_epsilon(1e-5) > 8.0  # a smaller sigma would overspend: the calibration is tight


def test_l1diffnetwork_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="personal head"):
        PrivateServer(
            make_strategy("l1diffnetwork"),
            clients_for("fedavg"),
            NUM_FEATURES,
            NUM_CLASSES,
            config(),
            PrivacyConfig(secagg=True),
        )


def test_dp_sgd_clips_every_example_against_a_reference():
    """One DP-SGD step (SGD, lr 1, q = 1 so every example is in the batch, no noise) equals the
    per-example clipped mean gradient computed one example at a time here; a 1e6-scaled example
    moves the weights by at most clip / n."""
    from fedkernels.fl.dpsgd import train_dp_sgd
    from fedkernels.fl.local import make_optimizer
    from python_tests.support.fl_data import tiny_dataset

    data = tiny_dataset(8, seed=4)
    data.x[3] *= 1e6
    w0 = torch.randn(data.x.shape[1], generator=torch.Generator().manual_seed(0))

    def loss_fn(batch):
        return ((batch.x @ w) - batch.indptr.diff().float()).pow(2).mean()

    clip = 0.25
    cfg = TrainConfig(epochs=1, batch_size=8, lr=1.0, optimizer="sgd", dp_sample_clip=clip, dp_sample_noise=0.0)
    w = w0.clone().requires_grad_(True)
    train_dp_sgd([w], loss_fn, data, cfg, torch.Generator().manual_seed(1), make_optimizer([w], cfg))
    ref = torch.zeros_like(w0)
    for i in range(8):
        wi = w0.clone().requires_grad_(True)
        row = data.rows(torch.tensor([i]))
        (g,) = torch.autograd.grad(((row.x @ wi) - row.indptr.diff().float()).pow(2).mean(), wi)
        ref += g * min(1.0, clip / g.norm().item())
    assert torch.allclose(w.detach(), w0 - ref / 8, atol=1e-5, rtol=1e-5)
    assert (w.detach() - w0).norm().item() <= clip + 1e-6


def test_strategies_without_a_private_form_are_refused():
    """Stateful clients and label counts have no sum to hide: refused, saying why (L1Diff's gamma_rel,
    which the summed round-0 step sets under SecAgg+, is refused only with DP: test_l1diff_segments)."""
    from fedkernels.fl.algorithms import L1Diff, LabelPrior, PartialExchange
    from fedkernels.fl.privacy.forms import form_of

    for strategy, why in [
        (PartialExchange(keep_unreceived=True), "stateful clients"),
        (LabelPrior(), "label counts"),
    ]:
        with pytest.raises(ValueError, match=why):
            form_of(strategy)
    form_of(PartialExchange(keep_unreceived=False))
    form_of(L1Diff(gamma=0.1))
    form_of(L1Diff(gamma_rel=0.5))
