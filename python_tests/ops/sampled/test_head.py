"""SampledSoftmaxHead: each variant's loss and gradients against the dense formula, the id map, the payload."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import fedkernels
from fedkernels.nn import SampledSoftmaxHead, logq_correction
from python_tests.reference import sampled_ref


def _setup(seed: int = 0, p: int = 60, d: int = 6, n: int = 12, m: int = 10):
    g = torch.Generator().manual_seed(seed)
    W_full = torch.randn(p, d, generator=g, dtype=torch.float64)
    positives = torch.tensor([3, 17, 17, 40, 58])
    negatives = fedkernels.sample_negatives(positives, p, m, seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64)
    target = torch.tensor([3, 17, 40, 58])[torch.randint(0, 4, (n,), generator=g)]
    return W_full, positives, negatives, h, target


def _dense_loss(h, rows, local_target, bias=None, scale=1.0):
    z = scale * h @ rows.T
    if bias is not None:
        z = z + bias
    return F.cross_entropy(z, local_target)


@given(seed=st.integers(0, 1000), m=st.integers(0, 20), scale=st.sampled_from([1.0, 4.0]))
def test_fedss_is_sampled_softmax_with_logq(seed, m, scale):
    W_full, pos, neg, h, target = _setup(seed, m=m)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, "fedss", scale=scale)
    upos = torch.unique(pos)
    ids = torch.cat([upos, neg])
    local = torch.tensor([ids.tolist().index(int(t)) for t in target])
    bias = torch.zeros(len(ids), dtype=torch.float64)
    bias[len(upos) :] = -math.log(m * (1.0 / (60 - len(upos)))) if m else 0.0  # -log(m q), q = 1/|complement|
    ref_rows = W_full[ids].clone().requires_grad_()
    ref = _dense_loss(h, ref_rows, local, bias, scale)
    loss = head(h, target)
    torch.testing.assert_close(loss, ref)
    loss.backward()
    ref.backward()
    torch.testing.assert_close(head.weight.grad, ref_rows.grad)


def test_posonly_and_full():
    W_full, pos, neg, h, target = _setup(1)
    upos = torch.unique(pos)
    local = torch.tensor([upos.tolist().index(int(t)) for t in target])
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, "posonly")
    assert head.class_ids.tolist() == upos.tolist()  # negatives are not even gathered
    torch.testing.assert_close(head(h, target), _dense_loss(h, W_full[upos], local))
    full = SampledSoftmaxHead.gather(W_full, pos, neg, 60, "full")
    torch.testing.assert_close(full(h, target), F.cross_entropy(h @ W_full.T, target))


def test_negonly_uses_target_and_negatives_only():
    W_full, pos, neg, h, target = _setup(2, m=15)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, "negonly")
    k = 60 - len(torch.unique(pos))
    corr = math.log(k / 15)
    per = []
    for i in range(len(target)):
        z_t = h[i] @ W_full[target[i]]
        z_n = h[i] @ W_full[neg].T + corr
        per.append(torch.logsumexp(torch.cat([z_t[None], z_n]), 0) - z_t)
    want = torch.stack(per).mean()
    loss = head(h, target)
    torch.testing.assert_close(loss, want)
    loss.backward()
    assert head.weight.grad.abs().sum() > 0


def test_ignore_index_and_reductions():
    W_full, pos, neg, h, target = _setup(3)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60)
    t = target.clone()
    t[::2] = -100
    per = head(h, t, reduction="none")
    assert per.shape == t.shape and bool((per[::2] == 0).all())
    torch.testing.assert_close(head(h, t, reduction="sum"), per.sum())
    torch.testing.assert_close(head(h, t), per.sum() / (t != -100).sum())


def test_id_map_and_payload():
    W_full, pos, neg, h, target = _setup(4)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60)
    ids = head.class_ids
    assert torch.equal(head.weight[head.local_index(ids)], W_full[ids].to(head.weight.dtype))
    with pytest.raises(IndexError, match="does not hold"):
        head.local_index(torch.tensor([int(sorted(set(range(60)) - set(ids.tolist()))[0])]))
    opt = torch.optim.SGD(head.parameters(), lr=0.1)
    head(h, target).backward()
    opt.step()
    out_ids, rows = head.updated_rows()
    assert torch.equal(out_ids, ids) and rows.shape == (len(ids), W_full.shape[1])
    assert not torch.equal(rows, W_full[ids])


def test_logq_correction():
    assert logq_correction(100, 10, 30) == pytest.approx(math.log(90 / 30))
    assert logq_correction(100, 10, 0) == 0.0


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(variant="both"), ValueError, "variant"),
        (dict(num_positives=9), ValueError, "num_positives"),
        (dict(class_ids=torch.tensor([1, 1, 2])), ValueError, "distinct"),
        (dict(class_ids=torch.tensor([1, 2, 99])), IndexError, "class_ids"),
        (dict(class_ids=torch.tensor([1.0, 2.0, 3.0])), ValueError, "class_ids"),
    ],
)
def test_bad_construction(kwargs, exc, match):
    args = dict(weight=torch.randn(3, 4), class_ids=torch.tensor([5, 1, 2]), num_positives=1, num_classes=10)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        SampledSoftmaxHead(**args)


def test_target_must_be_a_positive():
    W_full, pos, neg, h, target = _setup(5)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60)
    bad = target.clone()
    bad[0] = neg[0]
    with pytest.raises(IndexError, match="positive"):
        head(h, bad)


def _multilabel_batch(rng: np.random.Generator, positives: list[int], n: int):
    """n samples, each with 1-3 distinct labels from positives: (labels per sample, pair rows, pair targets)."""
    labels = [sorted(rng.choice(positives, size=int(rng.integers(1, 4)), replace=False).tolist()) for _ in range(n)]
    rows = torch.tensor([i for i, ls in enumerate(labels) for _ in ls], dtype=torch.int64)
    targets = torch.tensor([c for ls in labels for c in ls], dtype=torch.int64)
    return labels, rows, targets


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    variant=st.sampled_from(["fedss", "posonly", "full"]),
    m=st.integers(0, 12),
    cosine=st.booleans(),
    scale=st.sampled_from([1.0, 20.0]),
)
def test_excluding_co_positives_matches_the_row_loop(seed, variant, m, cosine, scale):
    rng = np.random.default_rng(seed)
    p, d = 40, 5
    positives = sorted(rng.choice(p, size=int(rng.integers(3, 7)), replace=False).tolist())
    negatives = fedkernels.sample_negatives(torch.tensor(positives), p, m, seed)
    W_full = torch.tensor(rng.normal(size=(p, d)))
    head = SampledSoftmaxHead.gather(W_full, torch.tensor(positives), negatives, p, variant)
    head.scale, head.cosine = scale, cosine
    labels, rows, targets = _multilabel_batch(rng, positives, int(rng.integers(1, 6)))
    h = torch.tensor(rng.normal(size=(len(labels), d)))[rows]
    exclude = torch.tensor(
        [
            [j, c]
            for j, (i, t) in enumerate(zip(rows.tolist(), targets.tolist(), strict=True))
            for c in labels[i]
            if c != t
        ],
        dtype=torch.int64,
    ).reshape(-1, 2)
    ids = head.class_ids.tolist()
    used = len(positives) if variant == "posonly" else len(ids)
    ref_rows = head.weight.detach()[:used].clone().requires_grad_()
    hr, wr = h, ref_rows
    if cosine:
        hr, wr = torch.nn.functional.normalize(h, dim=1), torch.nn.functional.normalize(ref_rows, dim=1)
    excluded = [
        {ids.index(c) for c in labels[i] if c != t} for i, t in zip(rows.tolist(), targets.tolist(), strict=True)
    ]
    local = torch.tensor([ids.index(t) for t in targets.tolist()])
    bias = head.bias[:used].double() if variant == "fedss" else None
    want = sampled_ref.cross_entropy_excluding(hr, wr, local, excluded, bias, scale)
    got = head(h, targets, exclude=exclude)
    torch.testing.assert_close(got, want)
    got.backward()
    want.backward()
    torch.testing.assert_close(head.weight.grad[:used], ref_rows.grad)
    if variant == "posonly":
        assert not head.weight.grad[used:].any()


def test_excluding_nothing_is_the_fused_loss():
    W_full, pos, neg, h, target = _setup(3)
    for variant in ("fedss", "posonly", "full"):
        head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, variant, scale=2.0)
        none = torch.zeros(0, 2, dtype=torch.int64)
        torch.testing.assert_close(head(h, target, exclude=none), head(h, target))


def test_excluding_keeps_ignored_rows_finite():
    W_full, pos, neg, h, target = _setup(4)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, "posonly")
    target = target.clone()
    target[0] = -100  # row 0 ignored, and every class it could see excluded
    exclude = torch.tensor([[0, c] for c in torch.unique(pos).tolist()], dtype=torch.int64)
    loss = head(h, target, exclude=exclude)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(head.weight.grad).all()
    want = head(h[1:], target[1:])
    torch.testing.assert_close(loss, want)  # the ignored row adds nothing


@pytest.mark.parametrize(
    ("variant", "exclude", "exc", "match"),
    [
        ("negonly", [[0, 3]], ValueError, "not for 'negonly'"),
        ("fedss", [[0, 3]], ValueError, "own target"),  # row 0's target is 3 below
        ("fedss", [[99, 17]], IndexError, "rows must lie"),
        ("fedss", [[0, 59]], IndexError, "does not hold"),
        ("posonly", [[0, -1]], IndexError, "does not hold"),
    ],
)
def test_bad_exclude(variant, exclude, exc, match):
    W_full, pos, neg, h, target = _setup(5)
    target = target.clone()
    target[0] = 3
    neg = neg[neg != 59]
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, variant)
    with pytest.raises(exc, match=match):
        head(h, target, exclude=torch.tensor(exclude, dtype=torch.int64))


def test_exclude_must_be_int64_pairs():
    W_full, pos, neg, h, target = _setup(6)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, "fedss")
    with pytest.raises(ValueError, match=r"int64 \[E, 2\]"):
        head(h, target, exclude=torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="h's device"):
        head(h, target, exclude=torch.zeros(0, 2, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="reduction"):
        head(h, target, reduction="max", exclude=torch.zeros(0, 2, dtype=torch.int64))


def test_exclude_refuses_logits_over_the_bound(monkeypatch):
    from fedkernels.nn import sampled_softmax

    W_full, pos, neg, h, target = _setup(7)
    head = SampledSoftmaxHead.gather(W_full, pos, neg, 60, "full")
    monkeypatch.setattr(sampled_softmax, "MAX_EXCLUDE_LOGITS", h.shape[0] * 60 - 1)
    with pytest.raises(ValueError, match="over the bound"):
        head(h, target, exclude=torch.zeros(0, 2, dtype=torch.int64))
    monkeypatch.setattr(sampled_softmax, "MAX_EXCLUDE_LOGITS", h.shape[0] * 60)
    head(h, target, exclude=torch.zeros(0, 2, dtype=torch.int64))  # exactly at the bound: allowed
