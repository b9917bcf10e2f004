"""DP-FTRL (tree aggregation): client-level DP with public participation, tried as an auditor would.

Claims (docs/api/privacy.md): each client takes part in at most one round of a tree; the noise of the
released rounds telescopes to the tree's prefix noise, so the model after ``j`` rounds of FedAvg carries
exactly the noise of the dyadic nodes covering ``[0, j)``; every round is covered by at most
``bit_length(T)`` nodes of a tree of ``T`` rounds; the reported epsilon is ``dp-accounting``'s tree
aggregation for the trees the run went through, with no sampling assumption.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
dp_accounting = pytest.importorskip("dp_accounting", reason="needs the extra fedkernels[privacy]")

import torch  # noqa: E402

from fedkernels.fl import RunConfig, TrainConfig  # noqa: E402
from fedkernels.fl.privacy import (  # noqa: E402
    DPConfig,
    PrivacyConfig,
    PrivateServer,
    ftrl,
)
from fedkernels.fl.privacy.mechanism import published_record  # noqa: E402
from python_tests.reference.ftrl_ref import dyadic_cover, prefix_noise  # noqa: E402
from python_tests.support.flower_runs import NUM_CLASSES, NUM_FEATURES, client_data, make_strategy  # noqa: E402

N = 6


@given(st.integers(0, 1 << 20))
def test_dyadic_nodes_are_the_greedy_cover(j):
    assert ftrl.dyadic_nodes(j) == dyadic_cover(j)


@given(st.integers(1, 300))
def test_each_round_is_in_at_most_bit_length_nodes_of_its_tree(total):
    """Over every prefix a tree of ``total`` rounds releases, the distinct nodes holding round i."""
    used = {node for j in range(total + 1) for node in ftrl.dyadic_nodes(j)}
    for i in range(total):
        holding = [(lv, a) for lv, a in used if a <= i < a + (1 << lv)]
        assert len(holding) <= total.bit_length()


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 40), st.integers(0, 2**40))
def test_released_round_noise_telescopes_to_the_prefix_noise(j, seed):
    shapes = {"w": (3, 2), "b": (2,)}
    total = {n: torch.zeros(s, dtype=torch.float64) for n, s in shapes.items()}
    for pos in range(j):
        for n, z in ftrl.round_noise(seed, 4, pos, shapes, 0.7).items():
            total[n] += z
    want = prefix_noise(lambda node: ftrl.node_noise(seed, 4, node, shapes, 0.7), j)
    for n in shapes:
        torch.testing.assert_close(total[n], want[n], rtol=0, atol=1e-12)


@given(st.integers(1, 50), st.integers(1, 50), st.integers(0, 30), st.integers(0, 1000))
def test_each_client_takes_part_at_most_once_a_tree(n, per_round, rounds, seed):
    per_round = min(per_round, n)
    seen: dict[int, set[int]] = {}
    for r in range(rounds):
        tree, pos, clients = ftrl.tree_round(seed, r, n, per_round)
        assert len(clients) == per_round and clients == sorted(set(clients))
        assert all(0 <= c < n for c in clients) and pos == r % (n // per_round)
        assert not seen.setdefault(tree, set()) & set(clients)
        seen[tree] |= set(clients)


def _server(rounds, noise=1.5, per_round=2, seed=3, **dp):
    priv = PrivacyConfig(dp=DPConfig(0.5, noise=noise, mechanism="tree", **dp), noise_seed=17)
    cfg = RunConfig(rounds=rounds, clients_per_round=per_round, seed=seed, train=TrainConfig(epochs=1, lr=0.3))
    return PrivateServer(
        make_strategy("fedavg"), [client_data(i, N) for i in range(N)], NUM_FEATURES, NUM_CLASSES, cfg, priv
    )


def test_fedavg_after_j_rounds_carries_exactly_the_prefix_noise():
    """Every client contributes zero: after j rounds of the first tree (3 rounds a tree at 6 clients,
    2 a round) the model moved by the tree's prefix noise over [0, j) divided by the 2 clients a round."""
    s = _server(3)
    real = s.form.contribution
    s.form.contribution = lambda *a, **k: {n: torch.zeros_like(t) for n, t in real(*a, **k).items()}
    start = {k: v.clone() for k, v in s.state.items()}
    seed = int(s.state[ftrl.TREE_SEED])
    names = s.form.names(s.state)
    shapes = {n: tuple(s.state[n].shape) for n in names}
    for j in range(1, 4):
        rec = s.run_round()
        assert not rec.skipped and rec.privacy["tree"] == 0
        want = prefix_noise(lambda node: ftrl.node_noise(seed, 0, node, shapes, 1.5 * 0.5), j)
        for n in names:
            moved = s.state[n].double() - start[n].double()
            torch.testing.assert_close(moved, want[n] / 2, rtol=0, atol=1e-5)


def test_reported_epsilon_is_dp_accountings_tree_aggregation():
    """7 rounds at 3 rounds a tree: trees of 3, 3 and 1 rounds, composed by dp-accounting directly."""
    s = _server(7)
    s.run()
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(
        dp_accounting.ComposedDpEvent([dp_accounting.SingleEpochTreeAggregationDpEvent(1.5, n) for n in (3, 3, 1)])
    )
    last = s.history[-1].privacy
    assert last["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    assert last["epsilon_server"] == math.inf  # the server adds the noise: it sees the sums
    # participation is public: the published rounds keep their clients (nothing relies on hiding them)
    assert all(published_record(r).clients == r.clients for r in s.history)


def test_target_epsilon_calibrates_the_trees_within_budget():
    s = _server(7, noise=None, target_epsilon=6.0)
    s.run()
    eps = s.history[-1].privacy["epsilon"]
    assert eps <= 6.0 and eps == pytest.approx(6.0, rel=2e-3)


def test_the_tree_mechanism_needs_the_rdp_accountant():
    with pytest.raises(ValueError, match="rdp accountant"):
        DPConfig(0.5, noise=1.0, mechanism="tree", accountant="pld")
    with pytest.raises(ValueError, match="mechanism must be one of"):
        DPConfig(0.5, noise=1.0, mechanism="shuffle")


def test_no_download_of_a_private_round_carries_a_server_side_entry():
    """The tree's secret seed is a server-side state entry: FedAvg's payload is its whole state, yet no
    client ever receives the seed (it would let the client recompute the noise)."""
    from fedkernels.fl import payload as pl
    from fedkernels.fl.strategy import SERVER

    seen: list[str] = []

    class Spy:
        def __init__(self, inner):
            self.inner = inner

        def handle(self, kind, round, seed, message):
            seen.extend(pl.decode(message))
            return self.inner.handle(kind, round, seed, message)

    priv = PrivacyConfig(dp=DPConfig(0.5, noise=1.0, mechanism="tree"), noise_seed=2)
    cfg = RunConfig(rounds=2, clients_per_round=2, seed=3, train=TrainConfig(epochs=1, lr=0.3))
    clients = [client_data(i, N) for i in range(N)]
    s = PrivateServer(
        make_strategy("fedavg"), clients, NUM_FEATURES, NUM_CLASSES, cfg, priv, client_wrapper=lambda c, e: Spy(e)
    )
    s.run()
    assert ftrl.TREE_SEED in s.state and seen and not [n for n in seen if n.startswith(SERVER)]
