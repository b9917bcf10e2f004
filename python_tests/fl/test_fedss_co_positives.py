"""FedSS's exclude_co_positives: a multi-label sample's (sample, label) terms do not compete with that
sample's other labels. Checked against plain loops and a hand-written SGD step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels.fl import ClientData, TrainConfig
from fedkernels.fl.algorithms.fedss import _co_positive_pairs, _pairs
from fedkernels.fl.registry import make_strategy
from python_tests.reference import sampled_ref
from python_tests.support.fl_data import tiny_dataset


@settings(max_examples=50, deadline=None)
@given(labels=st.lists(st.lists(st.integers(0, 6), max_size=4), max_size=6))
def test_co_positive_pairs_match_the_loop(labels):
    indptr = torch.tensor(np.cumsum([0] + [len(ls) for ls in labels]), dtype=torch.int64)
    indices = torch.tensor([c for ls in labels for c in ls], dtype=torch.int64)
    batch = ClientData(torch.zeros(len(labels), 1), indptr, indices, 7)
    rows, targets = _pairs(batch)
    got = _co_positive_pairs(indptr, rows, targets)
    want = [
        (j, c)
        for j, (i, t) in enumerate(zip(rows.tolist(), targets.tolist(), strict=True))
        for c in labels[i]
        if c != t
    ]  # duplicates of another label stay (masking twice is masking once); the pair's own label never
    assert got.dtype == torch.int64 and got.shape == (len(want), 2)
    assert sorted(map(tuple, got.tolist())) == sorted(want)


def _one_step(strategy, data: ClientData, lr: float = 0.5):
    state = strategy.init_state(data.x.shape[1], data.num_classes, seed=0)
    request = strategy.client_request(data, 0, seed=1)
    payload = strategy.client_payload(state, 0, request, 0, seed=1)
    config = TrainConfig(epochs=1, batch_size=len(data), lr=lr, optimizer="sgd")  # one full-batch SGD step
    return payload, strategy.client_update(payload, data, config, 0, seed=2)


@pytest.mark.parametrize("name", ["FedSS", "FedSS-PosOnly", "FedSS-FullSoftmax"])
def test_one_sgd_step_descends_the_excluding_loss(name):
    data = tiny_dataset(30, num_features=6, num_classes=8, seed=3)
    assert int(data.indptr.diff().max()) >= 2  # multi-label: the option has something to leave out
    opts = {"hidden": [], "embed_dim": 4, "scale": 3.0, "cosine": True}
    if name == "FedSS":
        opts["num_negatives"] = 2
    payload, up = _one_step(make_strategy(name, exclude_co_positives=True, **opts), data)
    # the reference: the body is one Linear F -> d; every (sample, label) pair's softmax over the
    # downloaded rows this variant uses, minus the sample's other labels, logQ-shifted negatives for FedSS
    ids = payload["class_ids"].tolist()
    num_pos = int(payload["num_positives"][0])
    used = num_pos if name == "FedSS-PosOnly" else len(ids)
    W0 = payload["0.weight"].double().clone().requires_grad_()
    b0 = payload["0.bias"].double().clone().requires_grad_()
    R = payload["rows"].double()[:used].clone().requires_grad_()
    pair_rows, targets = _pairs(data)
    labels = [data.indices[data.indptr[i] : data.indptr[i + 1]].tolist() for i in range(len(data))]
    h = torch.nn.functional.normalize((data.x.double() @ W0.T + b0)[pair_rows], dim=1)
    excluded = [
        {ids.index(c) for c in labels[i] if c != t} for i, t in zip(pair_rows.tolist(), targets.tolist(), strict=True)
    ]
    local = torch.tensor([ids.index(t) for t in targets.tolist()])
    bias = None
    if name == "FedSS":
        bias = torch.zeros(used, dtype=torch.float64)
        bias[num_pos:] = float(np.log((data.num_classes - num_pos) / (used - num_pos)))
    loss = sampled_ref.cross_entropy_excluding(h, torch.nn.functional.normalize(R, dim=1), local, excluded, bias, 3.0)
    loss.backward()
    torch.testing.assert_close(up["rows"][:used].double(), (R - 0.5 * R.grad).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(up["0.weight"].double(), (W0 - 0.5 * W0.grad).detach(), rtol=1e-5, atol=1e-5)
    # and it is not the plain loss's step (the option changes the update on multi-label data)
    _, plain = _one_step(make_strategy(name, **opts), data)
    assert not torch.allclose(plain["rows"], up["rows"], rtol=1e-4, atol=1e-5)


def test_single_label_data_is_unchanged():
    data = tiny_dataset(30, num_features=6, num_classes=8, seed=4)
    first = data.indptr[:-1][data.indptr.diff() > 0]
    keep = data.rows(torch.nonzero(data.indptr.diff() > 0)[:, 0])
    single = ClientData(keep.x, torch.arange(len(keep) + 1, dtype=torch.int64), data.indices[first], 8)
    opts = {"hidden": [3], "embed_dim": 4, "num_negatives": 2}
    _, a = _one_step(make_strategy("FedSS", exclude_co_positives=True, **opts), single)
    _, b = _one_step(make_strategy("FedSS", **opts), single)
    for k in a:
        torch.testing.assert_close(a[k], b[k])


def test_negonly_refuses_the_option():
    with pytest.raises(ValueError, match="not for NegOnly"):
        make_strategy("FedSS-NegOnly", exclude_co_positives=True)
