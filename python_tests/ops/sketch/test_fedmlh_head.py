"""FedMLHHead: batched sub-models equal R separate MLPs; loss, top-k and scores use the kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from fedkernels import HashFamily
from fedkernels.nn import FedMLHHead
from python_tests.reference import sketch_ref
from python_tests.support.helpers import csr_from_lists


def _random_labels(n: int, p: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, p, (int(c),), generator=g).tolist() for c in torch.randint(0, 4, (n,), generator=g)]


def test_layout_and_buffers():
    head = FedMLHHead(12, num_classes=100, num_tables=3, num_buckets=16, hidden=(8, 5), seed=7)
    assert head.hash_family == HashFamily(3, 16, 7)
    assert head.table.dtype == torch.int32 and torch.equal(head.table, HashFamily(3, 16, 7).table(100))
    shapes = {name: tuple(p.shape) for name, p in head.named_parameters()}
    assert shapes == {
        "weights.0": (3, 12, 8),
        "weights.1": (3, 8, 5),
        "weights.2": (3, 5, 16),
        "biases.0": (3, 8),
        "biases.1": (3, 5),
        "biases.2": (3, 16),
    }
    assert set(head.state_dict()) == set(shapes)  # the table is rebuilt from the seed, never sent
    assert all(torch.equal(v, dict(head.named_parameters())[k][1]) for k, v in head.table_state(1).items())


def test_seeded_init_is_reproducible():
    a = FedMLHHead(6, num_classes=40, num_tables=3, num_buckets=8, hidden=(5,), seed=2)
    b = FedMLHHead(6, num_classes=40, num_tables=3, num_buckets=8, hidden=(5,), seed=2)
    a.reset_parameters(torch.Generator().manual_seed(11))
    b.reset_parameters(torch.Generator().manual_seed(11))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert all(x.abs().max() <= 1 / 6**0.5 for x in (a.weights[0], a.biases[0]))


@given(r=st.integers(1, 4), hidden=st.sampled_from([(), (6,), (7, 3)]), n=st.integers(0, 5), seed=st.integers(0, 99))
def test_batched_equals_separate_mlps(r, hidden, n, seed):
    torch.manual_seed(seed)
    head = FedMLHHead(9, num_classes=50, num_tables=r, num_buckets=11, hidden=hidden, seed=seed)
    x = torch.randn(n, 9)
    got = head(x)
    assert got.shape == (r, n, 11)
    for j in range(r):
        h = x
        for i, (w, b) in enumerate(zip(head.weights, head.biases, strict=True)):
            h = h @ w[j] + b[j]
            if i < len(head.weights) - 1:
                h = F.relu(h)
        torch.testing.assert_close(got[j], h, rtol=1e-5, atol=1e-5)


def test_loss_topk_scores_match_references():
    torch.manual_seed(0)
    head = FedMLHHead(10, num_classes=400, num_tables=4, num_buckets=32, hidden=(16,), seed=3)
    x = torch.randn(6, 10)
    indptr, indices = csr_from_lists(_random_labels(6, 400, 1))
    z = sketch_ref.label_hash(indptr, indices, head.table, 32).float()
    torch.testing.assert_close(head.loss(x, indptr, indices), F.binary_cross_entropy_with_logits(head(x), z))
    logp = F.logsigmoid(head(x)).detach()
    torch.testing.assert_close(head.scores(x), sketch_ref.bucket_merge(logp, head.table, "mean"), rtol=0, atol=0)
    values, classes = head.predict_topk(x, 7)
    want_v, want_i = sketch_ref.bucket_merge_topk(logp, head.table, 7, "mean")
    assert torch.equal(classes, want_i) and torch.equal(values, want_v)


def test_training_learns_the_labels():
    # 30 samples with 1-2 labels each out of 200 classes; the head must fit them (P@1 on train).
    torch.manual_seed(0)
    head = FedMLHHead(20, num_classes=200, num_tables=4, num_buckets=64, hidden=(64,), seed=1)
    x = torch.randn(30, 20)
    rows = [[i * 6 % 200, (i * 6 + 1) % 200][: 1 + i % 2] for i in range(30)]
    indptr, indices = csr_from_lists(rows)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    first = head.loss(x, indptr, indices).item()
    for _ in range(300):
        opt.zero_grad()
        loss = head.loss(x, indptr, indices)
        loss.backward()
        opt.step()
    assert loss.item() < 0.1 * first
    _, top1 = head.predict_topk(x, 1)
    assert sum(int(top1[i, 0]) in rows[i] for i in range(30)) >= 27


def test_moves_with_to(device):
    head = FedMLHHead(4, num_classes=30, num_tables=2, num_buckets=8).to(device)
    assert head.table.device.type == device
    v, i = head.predict_topk(torch.randn(3, 4, device=device), 5)
    assert v.shape == (3, 5) and i.device.type == device


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(in_features=0, num_classes=10, num_tables=2, num_buckets=4), "in_features"),
        (dict(in_features=3, num_classes=0, num_tables=2, num_buckets=4), "num_classes"),
        (dict(in_features=3, num_classes=10, num_tables=0, num_buckets=4), "num_tables"),
        (dict(in_features=3, num_classes=10, num_tables=2, num_buckets=0), "num_buckets"),
        (dict(in_features=3, num_classes=10, num_tables=2, num_buckets=4, hidden=(0,)), "hidden"),
    ],
)
def test_bad_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FedMLHHead(**kwargs)


def test_bad_calls():
    head = FedMLHHead(4, num_classes=30, num_tables=2, num_buckets=8)
    with pytest.raises(ValueError, match="x must be"):
        head(torch.randn(3, 5))
    with pytest.raises(ValueError, match="k must be <="):
        head.predict_topk(torch.randn(3, 4), 31)
    indptr, indices = csr_from_lists([[0, 30]])
    with pytest.raises(IndexError, match="indices"):
        head.loss(torch.randn(1, 4), indptr, indices)
    with pytest.raises(IndexError, match="table index"):
        head.table_state(2)


def test_round_trip_through_fl_payloads_and_per_table_average():
    # What a FedMLH strategy does with the head: ship state_of() as safetensors, average every
    # table's slice param[j] across clients, load it back (the table buffer never travels).
    from fedkernels.fl.models import load_state, state_of
    from fedkernels.fl.payload import PayloadSpec, decode, encode, state_spec

    heads = []
    for client in range(3):
        h = FedMLHHead(5, num_classes=60, num_tables=3, num_buckets=8, hidden=(4,), seed=9)
        h.reset_parameters(torch.Generator().manual_seed(client))
        heads.append(h)
    states = [decode(encode(state_of(h)), PayloadSpec(state_spec(state_of(heads[0])))) for h in heads]
    weights = [1.0, 2.0, 5.0]
    merged = {
        name: torch.stack(
            [sum(w * s[name][j] for w, s in zip(weights, states, strict=True)) / sum(weights) for j in range(3)]
        )
        for name in states[0]
    }
    server = load_state(FedMLHHead(5, num_classes=60, num_tables=3, num_buckets=8, hidden=(4,), seed=9), merged)
    for j in range(3):
        for name, got in server.table_state(j).items():
            want = sum(w * h.table_state(j)[name] for w, h in zip(weights, heads, strict=True)) / sum(weights)
            torch.testing.assert_close(got, want)
    assert torch.equal(server.table, heads[0].table)


def test_loss_reuses_target_buffers_without_changing_results():
    """loss() hashes into one kept buffer per batch size (the two most recently used are kept); the
    loss of each step is bit-identical to BCE against freshly hashed reference targets, and
    state_dict() is unchanged."""
    torch.manual_seed(0)
    head = FedMLHHead(10, num_classes=400, num_tables=4, num_buckets=32, hidden=(16,), seed=3)
    keys = set(head.state_dict())
    bufs = []
    for step, n in enumerate([6, 6, 3, 6, 5, 6, 3]):
        x = torch.randn(n, 10)
        indptr, indices = csr_from_lists(_random_labels(n, 400, step))
        z = sketch_ref.label_hash(indptr, indices, head.table, 32).float()
        want = F.binary_cross_entropy_with_logits(head(x), z)
        torch.testing.assert_close(head.loss(x, indptr, indices), want, rtol=0, atol=0)
        bufs.append(head._target_buffers[(n, torch.device("cpu"))])
        assert len(head._target_buffers) <= 2
    assert bufs[1] is bufs[0] and bufs[3] is bufs[0] and bufs[5] is bufs[0]  # N = 6 kept throughout
    assert bufs[2] is not bufs[6]  # N = 3 was the least recently used when N = 5 came
    assert set(head.state_dict()) == keys


def test_copies_and_pickles_leave_target_buffers_behind():
    import copy
    import pickle

    head = FedMLHHead(10, num_classes=400, num_tables=4, num_buckets=32, hidden=(16,), seed=3)
    indptr, indices = csr_from_lists(_random_labels(6, 400, 1))
    x = torch.randn(6, 10)
    want = head.loss(x, indptr, indices)
    assert head._target_buffers
    for twin in (copy.deepcopy(head), pickle.loads(pickle.dumps(head))):
        assert not getattr(twin, "_target_buffers", {})
        torch.testing.assert_close(twin.loss(x, indptr, indices), want, rtol=0, atol=0)  # and it still works
    assert head._target_buffers  # the original keeps its own


def test_targets_into_out():
    head = FedMLHHead(10, num_classes=400, num_tables=4, num_buckets=32, seed=3)
    indptr, indices = csr_from_lists(_random_labels(6, 400, 1))
    buf = torch.full((4, 6, 32), 0xFF, dtype=torch.uint8)
    assert head.targets(indptr, indices, out=buf) is buf
    assert torch.equal(buf, sketch_ref.label_hash(indptr, indices, head.table, 32))


def test_documented_outputs_forward_is_bucket_logits_and_topk_gives_classes():
    # The class docstring, the README and docs/tutorial.md promise these shapes: forward is the
    # bucket view [R, N, B], predict_topk the k best classes [N, k], scores every class [N, p].
    head = FedMLHHead(in_features=12, num_classes=50, num_tables=3, num_buckets=7, hidden=(8,))
    x = torch.randn(5, 12)
    assert head(x).shape == (3, 5, 7)
    values, classes = head.predict_topk(x, k=4)
    assert values.shape == classes.shape == (5, 4) and classes.dtype == torch.int64
    scores = head.scores(x)
    assert scores.shape == (5, 50)
    assert torch.equal(classes, scores.topk(4, dim=1).indices) or torch.allclose(values, scores.topk(4, dim=1).values)
