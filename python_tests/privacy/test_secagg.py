"""SecAgg+ (fedkernels.fl.privacy.secagg) against the plain sum: exact in the ring, within the encoding
bound after decoding; dropouts up to k - threshold around a client recovered, one more refused by name;
a masked upload is uniform; inconsistent server messages refused. Real X25519/ChaCha20-Poly1305/Shamir
throughout (small sessions: CI time). Malicious clients and colluders: test_attacks.py."""

from __future__ import annotations

import pytest

pytest.importorskip("cryptography", reason="needs the extra fedkernels[privacy]")
pytest.importorskip("Crypto", reason="needs the extra fedkernels[privacy]")

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from fedkernels.fl.privacy import crypto
from fedkernels.fl.privacy.ring import RingCodec, fraction_bits, from_wire, to_wire
from fedkernels.fl.privacy.secagg import (
    SecAggClient,
    SecAggError,
    SecAggParams,
    SecAggServer,
    neighbour_graph,
)
from fedkernels.fl.privacy.secagg_params import graph_params
from python_tests.support.secagg_sessions import ring_sum, run_session


def params_of(n, length=6, bits=32, k=None, threshold=None, seed=0, corrupt=0.1, dropout=0.1):
    g = graph_params(n, corrupt, dropout, k)
    k = g.k if k is None else k
    return SecAggParams(
        tuple(range(n)), length, bits, k, g.threshold if threshold is None else threshold, seed, b"test"
    )


@settings(max_examples=6, deadline=None)
@given(
    n=st.integers(2, 6),
    length=st.integers(0, 17),
    bits=st.sampled_from([16, 32, 40]),
    seed=st.integers(0, 2**31 - 1),
)
def test_unmasked_sum_exact_in_ring_and_within_bound(n, length, bits, seed):
    g = torch.Generator().manual_seed(seed)
    codec = RingCodec(bits, n, 2.0)
    reals = {c: (torch.rand(length, generator=g, dtype=torch.float64) * 5 - 2.5) for c in range(n)}  # some clamp
    xs = {c: codec.encode(x) for c, x in reals.items()}
    p = SecAggParams(tuple(range(n)), length, bits, n - 1, min(2, n - 1), seed, b"test")
    srv, refused = run_session(p, xs)
    total = srv.result()
    assert not refused and srv.summed == list(range(n))
    assert torch.equal(total, ring_sum(xs, list(range(n)), bits))  # the reference: plain modular sum
    plain = sum(x.clamp(-2.0, 2.0) for x in reals.values())
    assert (codec.decode(total) - plain).abs().max().item() <= codec.error_bound(n) + 1e-12 if length else True


def test_dropouts_up_to_the_tolerance_recover_the_summed_clients():
    n = 8  # complete graph: k = 7, threshold 4
    p = SecAggParams(tuple(range(n)), 5, 32, 7, 4, 0, b"test")
    xs = {c: torch.full((5,), c + 1, dtype=torch.int64) for c in range(n)}
    # one never advertises, one drops before its masked input (its masks are rebuilt from s shares),
    # one after it (its vector counts: its seed is rebuilt from the others' shares)
    srv, refused = run_session(p, xs, {0: "advertise", 3: "masked", 6: "unmask"})
    assert srv.summed == [1, 2, 4, 5, 6, 7] and not refused
    assert torch.equal(srv.result(), ring_sum(xs, srv.summed, 32))


def test_more_dropouts_than_the_tolerance_refuse_naming_the_client():
    p = SecAggParams(tuple(range(8)), 3, 32, 7, 4, 0, b"test")
    xs = {c: torch.zeros(3, dtype=torch.int64) for c in range(8)}
    srv, _ = run_session(p, xs, {1: "masked", 2: "unmask", 3: "unmask", 4: "unmask"})
    with pytest.raises(SecAggError, match=r"cannot unmask: client \d+'s .* has 3 of the 4 shares needed"):
        srv.result()


def test_harary_graph_tolerates_k_minus_threshold_and_refuses_one_more_around_a_client():
    n = 40
    p = params_of(n, length=2, seed=5)
    k, r = p.k, p.threshold
    graph = neighbour_graph(p)
    assert all(len(v) == k for v in graph.values()) and k < n - 1
    assert all(c in graph[d] for c in graph for d in graph[c])  # symmetric
    xs = {c: torch.ones(2, dtype=torch.int64) for c in range(n)}
    victim = 0
    drops = graph[victim][: k - r + 1]  # k - r + 1 of one client's holders leave after uploading
    srv, _ = run_session(p, xs, {d: "unmask" for d in drops[:-1]})
    assert torch.equal(srv.result(), torch.full((2,), n, dtype=torch.int64))
    srv, _ = run_session(p, xs, {d: "unmask" for d in drops})
    with pytest.raises(SecAggError, match=f"client {victim}'s self-mask seed has {r - 1} of the {r}"):
        srv.result()


def test_a_left_out_client_is_taken_out_through_its_neighbours_seeds_and_a_silent_one_counts_as_dropped():
    """Client 2 garbles the shares it sends: its neighbours reject them, it is left out, and in the
    seeds stage its summed neighbours send their pairwise seeds with it. One of them says nothing
    there (or answers for the wrong clients): it is treated as dropped (its own masks come out through
    its shares, its seed is never opened) and the sum is exactly that of the rest."""
    n = 8
    p = SecAggParams(tuple(range(n)), 3, 32, 4, 2, 7, b"test")
    xs = {c: torch.full((3,), 100 + c, dtype=torch.int64) for c in range(n)}
    silent = neighbour_graph(p)[2][0]

    def garble(stage, c, reply):
        if stage == "share" and c == 2:
            return {**reply, "cts": torch.zeros_like(reply["cts"])}
        if stage == "seeds" and c == silent and misbehave == "wrong":
            return {**reply, "seed_ids": reply["seed_ids"] + 1}
        return reply

    for misbehave in ("silent", "wrong"):
        drop = {silent: "seeds"} if misbehave == "silent" else {}
        srv, refused = run_session(p, xs, drop, mutate=garble)
        assert 2 in srv.left_out and "rejected them as garbled" in srv.left_out[2]
        assert srv.summed == [c for c in range(n) if c not in (2, silent)]
        assert list(refused) == ([silent] if misbehave == "wrong" else [])
        assert torch.equal(srv.result(), ring_sum(xs, srv.summed, 32))


def test_a_repair_without_a_needed_seed_refuses_the_round_naming_the_client():
    """The documented limit (docs/api/privacy.md, "Rounds two colluders abort"): client 5 deals shares
    of another seed than it committed to, and one of its summed neighbours sends no pairwise seed in
    the repair stage: the round is refused, naming that neighbour (leaving it out would reveal it)."""
    n = 8
    p = SecAggParams(tuple(range(n)), 3, 32, 4, 2, 9, b"test")
    clients = {c: SecAggClient(c, p) for c in range(n)}
    xs = {c: torch.full((3,), c, dtype=torch.int64) for c in range(n)}
    withholds = neighbour_graph(p)[5][0]

    def swap(stage, c, reply):
        if stage == "advertise" and c == 5:
            clients[5].b = crypto.random_bytes(crypto.SEED_BYTES)
        return reply

    srv, _ = run_session(p, xs, {withholds: "repair"}, mutate=swap, clients=clients)
    with pytest.raises(SecAggError, match=f"client {withholds} did not send the pairwise seeds"):
        srv.result()


def test_single_masked_upload_is_uniform():
    """A chi-square test of one client's masked upload of an all-zero (then all-max) vector against the
    uniform distribution over 64 bins of the top 6 bits. False-alarm rate 1e-3 per vector (alpha), so
    about 2e-3 for the test; masks come from the OS's CSPRNG, not a seed."""
    n, length = 3, 64 * 200
    p = SecAggParams(tuple(range(n)), length, 32, 2, 2, 0, b"test")
    codec = RingCodec(32, n, 1.0)
    for value in (0.0, 1.0):
        xs = {c: codec.encode(torch.full((length,), value)) for c in range(n)}
        clients = {c: SecAggClient(c, p) for c in range(n)}
        srv = SecAggServer(p)
        for c, cl in clients.items():
            srv.take_advertise(c, cl.advertise())
        for c, m in srv.share_messages().items():
            srv.take_shares(c, clients[c].share_keys(m))
        y = from_wire(clients[0].masked_input(srv.masked_messages()[0], xs[0])["y"], 32)
        counts = torch.bincount(y >> 26, minlength=64).numpy()
        assert chisquare(counts).pvalue > 1e-3


def test_clients_refuse_inconsistent_server_messages():
    p = SecAggParams(tuple(range(5)), 1, 32, 4, 2, 0, b"test")
    a = SecAggClient(0, p)
    a.advertise()
    with pytest.raises(SecAggError, match="not a subset of the public graph"):
        a.share_keys(
            {
                "ids": torch.tensor([0, 1]),
                "c_pk": torch.zeros(2, 32, dtype=torch.uint8),
                "s_pk": torch.zeros(2, 32, dtype=torch.uint8),
            }
        )
    b = SecAggClient(1, p)
    with pytest.raises(SecAggError, match="stage 2 arrived at stage 1"):
        b.share_keys({})
    with pytest.raises(SecAggError, match="before its masked input"):
        b.seeds({"left_out": torch.tensor([0])})
    with pytest.raises(SecAggError, match="not a participant"):
        SecAggClient(9, p)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(participants=(0,)), "participants"),
        (dict(participants=(1, 0)), "participants"),
        (dict(threshold=4), "threshold must lie in"),
        (dict(threshold=0), "threshold must lie in"),
        (dict(degree=3, participants=tuple(range(10))), "degree must be even"),
    ],
)
def test_session_params_validated(kw, match):
    base = dict(participants=(0, 1, 2, 3), length=1, bits=32, degree=3, threshold=2, graph_seed=0, session=b"s")
    with pytest.raises(ValueError, match=match):
        SecAggParams(**{**base, **kw})


@settings(max_examples=30, deadline=None)
@given(bits=st.integers(8, 62), n=st.integers(1, 5000), bound=st.floats(1e-3, 1e3))
def test_fraction_bits_is_the_largest_that_cannot_overflow(bits, n, bound):
    try:
        f = fraction_bits(bits, n, bound)
    except ValueError:
        assert n * (bound * 1.0 + 0.5) >= 2.0 ** (bits - 1)  # not even f = 0 fits
        return
    assert n * (bound * 2.0**f + 0.5) < 2.0 ** (bits - 1)
    assert f == 52 or n * (bound * 2.0 ** (f + 1) + 0.5) >= 2.0 ** (bits - 1)


def test_ring_wire_round_trip_and_range_check():
    codec = RingCodec(32, 3, 1.0)
    x = codec.encode(torch.tensor([-1.0, -0.3, 0.0, 0.7, 1.0, 5.0], dtype=torch.float64))
    assert torch.equal(from_wire(to_wire(x, 32), 32), x)
    assert (
        codec.decode(x) - torch.tensor([-1.0, -0.3, 0.0, 0.7, 1.0, 1.0], dtype=torch.float64)
    ).abs().max() <= codec.step() / 2
    with pytest.raises(ValueError, match="must lie in"):
        from_wire(torch.tensor([1 << 20]), 16)
    with pytest.raises(ValueError, match="cannot hold"):
        fraction_bits(16, 100_000, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 2**40), min_size=2, max_size=70, unique=True),
    half=st.integers(1, 20),
    seed=st.integers(0, 2**31 - 1),
)
def test_each_client_computes_its_own_neighbours_as_the_server_does(ids, half, seed):
    """neighbours_of (a client's O(n + k) view) equals the server's whole graph, and both equal the
    Harary graph read off the seeded ring: u and v are neighbours iff their circular distance in the
    ring is at most k // 2 (or everyone when k = n - 1)."""
    import numpy as np

    from fedkernels.fl.privacy.secagg import neighbours_of

    ids = sorted(ids)
    n = len(ids)
    p = SecAggParams(tuple(ids), 1, 32, min(2 * half, n - 1), 1, seed, b"t")  # even degrees; n - 1: everyone
    k = p.k
    ring = [ids[i] for i in np.random.default_rng(seed).permutation(n)]
    pos = {c: i for i, c in enumerate(ring)}
    graph = neighbour_graph(p)
    for c in ids:
        if k == n - 1:
            want = [d for d in ids if d != c]
        else:
            want = sorted(d for d in ids if d != c and min((pos[c] - pos[d]) % n, (pos[d] - pos[c]) % n) <= k // 2)
        assert graph[c] == want
        assert neighbours_of(p, c) == want
