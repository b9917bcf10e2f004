"""Private label-set collection: the digest pipeline against a plain-label reference."""

from __future__ import annotations

import hashlib
import hmac
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fedkernels.fl import labelsets as ls


def _plain_alpha(client_data: list[list[tuple[int, int]]], label_row: dict[int, int]) -> torch.Tensor:
    """Dense alpha from plain (instance id, label) pairs: obvious dict-and-loop counting."""
    sets: dict[int, set[int]] = defaultdict(set)
    for pairs in client_data:
        for inst, lab in pairs:
            sets[inst].add(lab)
    c = len(label_row)
    count = [0] * c
    cooc = [[0] * c for _ in range(c)]
    for labs in sets.values():
        for a in labs:
            count[label_row[a]] += 1
            for b in labs:
                if a != b:
                    cooc[label_row[a]][label_row[b]] += 1
    alpha = torch.ones(c, c)
    for i in range(c):
        for j in range(c):
            if cooc[i][j]:
                alpha[i, j] = 1.0 - cooc[i][j] / count[i]
    return alpha


@given(
    clients=st.lists(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 12)), max_size=25), min_size=1, max_size=6)
)
def test_matches_plain_label_reference(clients):
    key = b"k" * 16
    reports = [
        ls.client_report(key, [f"instance {i}".encode() for i, _ in pairs], [l for _, l in pairs]) for pairs in clients
    ]
    sets = ls.merge_reports(reports)
    labels = sorted({l for pairs in clients for _, l in pairs})
    assert sets.num_classes == len(labels)
    # the server's rows, recovered only by clients that hold the key
    label_row = {l: sets.row_of(ls.label_digest(key, l)) for l in labels}
    assert sorted(label_row.values()) == list(range(len(labels)))
    pw = sets.pair_weights()
    torch.testing.assert_close(pw.dense(), _plain_alpha(clients, label_row), rtol=0, atol=1e-6)
    counts = sets.counts()
    plain_sets = defaultdict(set)
    for pairs in clients:
        for i, l in pairs:
            plain_sets[i].add(l)
    for l, r in label_row.items():
        assert counts[r] == sum(l in s for s in plain_sets.values())
    assert sets.num_instances == len(plain_sets)


def test_digest_is_hmac_sha256_and_keyed():
    key = b"secret of the clients"
    want = hmac.new(key, b"fedkernels/label\x00" + (5).to_bytes(8, "little"), hashlib.sha256).digest()
    assert ls.label_digest(key, 5) == want and len(want) == 32
    assert ls.label_digest(b"other clients secret", 5) != want
    assert ls.instance_digest(key, b"abc") != ls.instance_digest(key, b"abd")
    # an instance whose bytes equal a label's encoding does not collide with that label (domains)
    assert ls.instance_digest(key, (5).to_bytes(8, "little")) != want


def test_array_instances_include_dtype_and_shape():
    key = b"s" * 16
    a = np.zeros(4, dtype=np.float32)
    assert ls.instance_digest(key, a) == ls.instance_digest(key, torch.zeros(4))
    assert ls.instance_digest(key, a) != ls.instance_digest(key, a.reshape(2, 2))
    assert ls.instance_digest(key, a) != ls.instance_digest(key, np.zeros(2, dtype=np.float64))


def test_server_sees_no_names():
    key = b"clients only, 16+ bytes"
    rep = ls.client_report(key, [b"the text of a secret document"], [42])
    blob = rep.to_tensor().numpy().tobytes()
    assert b"secret document" not in blob and (42).to_bytes(8, "little") not in blob
    assert rep.nbytes == 64 and ls.LabelReport.from_tensor(rep.to_tensor()) == rep


def test_hand_example():
    key = b"k" * 16
    r1 = ls.client_report(key, [b"doc-1", b"doc-2"], [3, 3])
    r2 = ls.client_report(key, [b"doc-1"], [7])
    sets = ls.merge_reports([r1, r2])
    a, b = sets.row_of(ls.label_digest(key, 3)), sets.row_of(ls.label_digest(key, 7))
    dense = sets.pair_weights().dense()
    assert dense[a, b].item() == pytest.approx(0.5) and dense[b, a].item() == 0.0
    with pytest.raises(KeyError):
        sets.row_of(ls.label_digest(key, 4))


def test_bad_input():
    with pytest.raises(ValueError, match="same length"):
        ls.client_report(b"k" * 16, [b"a"], [1, 2])
    with pytest.raises(ValueError, match="label"):
        ls.label_digest(b"k" * 16, -1)
    with pytest.raises(TypeError, match="instance"):
        ls.instance_digest(b"k" * 16, 3.5)
    with pytest.raises(ValueError, match="at least 16 bytes"):  # a short key is brute-forced
        ls.label_digest(b"k", 1)
    with pytest.raises(ValueError, match="must be bytes"):
        ls.instance_digest("a str key of 16+ chars", b"a")
    with pytest.raises(ValueError, match="report tensor"):
        ls.LabelReport.from_tensor(torch.zeros(2, 10, dtype=torch.uint8))


def test_empty():
    sets = ls.merge_reports([ls.client_report(b"k" * 16, [], [])])
    assert sets.num_classes == 0 and sets.num_instances == 0
    assert sets.pair_weights().indptr.tolist() == [0]
