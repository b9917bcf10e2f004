"""Smaller hostile inputs (issue "A server no client can exhaust or fool", item 7): every one is a
quick ValueError naming what is wrong, and a round of empty clients is skipped, not fatal."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable

import pytest
import torch

from fedkernels.data import xc_format
from fedkernels.data.datasets import MAX_DENSE_ELEMENTS, load_xc_dataset
from fedkernels.fl import ClientData, FedAvg, PayloadError, PayloadSpec, Server, TensorSpec
from fedkernels.fl import payload as pl
from fedkernels.hashing import HashFamily
from fedkernels.ops.sampled import sample_negatives, sample_negatives_batched
from python_tests.support.fl_data import tiny_dataset
from python_tests.support.hardening import NUM_CLASSES, NUM_FEATURES, run_config


def _empty() -> ClientData:
    return ClientData(
        torch.zeros(0, NUM_FEATURES), torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), NUM_CLASSES
    )


def test_round_of_empty_clients_is_skipped_and_recorded():
    s = Server(
        FedAvg(hidden=(8,)),
        [_empty() for _ in range(3)],
        NUM_FEATURES,
        NUM_CLASSES,
        run_config(rounds=2, clients_per_round=3),
    )
    before = {k: v.clone() for k, v in s.state.items()}
    hist = s.run()
    assert len(hist) == 2 and all(not h.failed and "0 examples" in h.skipped for h in hist)
    assert all(torch.equal(before[k], s.state[k]) for k in before)


def test_round_with_some_empty_clients_still_aggregates():
    clients = [_empty(), tiny_dataset(30, seed=1), _empty()]
    s = Server(FedAvg(hidden=(8,)), clients, NUM_FEATURES, NUM_CLASSES, run_config(rounds=1, clients_per_round=3))
    before = {k: v.clone() for k, v in s.state.items()}
    (rec,) = s.run()
    assert rec.skipped == "" and any(not torch.equal(before[k], s.state[k]) for k in before)


# ---- the XC reader ------------------------------------------------------------------------------
REFUSAL_PEAK_BYTES = 1 << 20
"""What a refusal from the header may allocate (numpy registers its arrays with tracemalloc): the
parse of a few short lines, far below one float32 row of F = 2**26 columns (256 MiB)."""


def _peak_bytes_of_refusal(call: Callable[[], object], match: str) -> int:
    """The traced peak bytes allocated while ``call`` raises a ``ValueError`` matching ``match``."""
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=match):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "line, what",
    [
        ("0 1:nan", "not a finite"),
        ("0 1:inf", "not a finite"),
        ("0 1:-Infinity", "not a finite"),
        ("0 1:1e999", "not a finite"),
        ("0 1:1e39", "not a finite"),
        ("0 1:1_0", "not a finite"),
        ("0 1:\u0663", "not a finite"),
        ("\u0663 1:0.5", "bad label id"),
        ("0,\u00b2 1:0.5", "bad label id"),
        ("0 \u0661:0.5", "bad feature"),
    ],
)
def test_xc_rejects_non_finite_values_and_non_ascii_ids(tmp_path, line, what):
    f = tmp_path / "bad.txt"
    f.write_text(f"2 4 4\n0 0:1.0\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{f}:3: .*{what}"):
        xc_format.read_xc(f)


@pytest.mark.parametrize(
    "header, what",
    [
        (f"1 {2**26 + 1} 3", "F=67108865 exceeds the bound 67108864"),
        (f"1 3 {2**64}", "L=18446744073709551616 exceeds"),
        (f"1 {10**30} 3", "F=.* exceeds"),
        ("1 \u0663 3", "header must be"),
    ],
)
def test_xc_bounds_f_and_l_before_allocating(tmp_path, header, what):
    f = tmp_path / "huge.txt"
    f.write_text(f"{header}\n0 0:1.0\n", encoding="utf-8")
    assert _peak_bytes_of_refusal(lambda: xc_format.read_xc(f), f"{f}: .*{what}") < REFUSAL_PEAK_BYTES
    # The load that would size a dense [1, F] matrix from the header: without the bound, F = 2**26 + 1
    # densifies to over 1 GiB (float64 and float32 copies of the row). It refuses the file too (its
    # libsvm fallback names the header line), having allocated as little.
    assert _peak_bytes_of_refusal(lambda: load_xc_dataset(f), f"{f}") < REFUSAL_PEAK_BYTES


def test_load_dataset_bounds_the_dense_size(tmp_path):
    """The audit's 74-byte file: a header F at the reader's bound, densified for N rows."""
    f = tmp_path / "all.txt"
    n = 8
    f.write_text(f"{n} {2**26} 2\n" + "0 0:1.0\n" * n, encoding="utf-8")
    assert n * 2**26 > MAX_DENSE_ELEMENTS
    # unbounded, the [n, 2**26] float64 densify alone would take n * 512 MiB
    want = f"{f}: the training features would be .* above the bound"
    assert _peak_bytes_of_refusal(lambda: load_xc_dataset(f), want) < REFUSAL_PEAK_BYTES
    assert load_xc_dataset(f, feature_dim=16).train.x.shape[1] == 16  # hashing is the way round it


# ---- the hash family and int arguments ----------------------------------------------------------
@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(num_tables=4, num_buckets=2**40), "num_buckets"),
        (dict(num_tables=4, num_buckets=2**31), "num_buckets"),
        (dict(num_tables=4, num_buckets=0), "num_buckets"),
        (dict(num_tables=0, num_buckets=8), "num_tables"),
        (dict(num_tables=2**20, num_buckets=8), "num_tables"),
        (dict(num_tables=2.5, num_buckets=8), "num_tables"),
        (dict(num_tables=True, num_buckets=8), "num_tables"),
        (dict(num_tables=4, num_buckets=8, seed=2**64), "seed"),
        (dict(num_tables=4, num_buckets=8, seed=-1), "seed"),
    ],
)
def test_hash_family_validates_its_integers(kw, name):
    with pytest.raises(ValueError, match=name):
        HashFamily(**kw)


def test_hash_family_largest_buckets_are_non_negative():
    hf = HashFamily(4, 2**31 - 1, seed=3)
    assert int(hf.buckets(torch.arange(1000)).min()) >= 0
    assert HashFamily(4, 8, seed=2**64 - 1).buckets(torch.tensor([5])).shape == (1, 4)


def test_ids_beyond_int64_are_a_value_error():
    with pytest.raises(ValueError, match="ids"):
        HashFamily(2, 8).buckets([2**63])


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(seed=2**63), "seed"),
        (dict(seed=2**64 + 5), "seed"),
        (dict(num_classes=2**63), "num_classes"),
        (dict(m=2**70), "m"),
        (dict(seed=1.5), "seed"),
    ],
)
def test_sampling_int_arguments_beyond_int64_are_a_value_error(kw, name):
    args = dict(num_classes=100, m=4, seed=0) | kw
    with pytest.raises(ValueError, match=f"^{name} must"):
        sample_negatives(torch.tensor([1, 2]), **args)
    with pytest.raises(ValueError, match=f"^{name} must"):
        sample_negatives_batched(torch.tensor([0, 2]), torch.tensor([1, 2]), **args)


def test_sampling_still_takes_any_int64_seed():
    assert sample_negatives(torch.tensor([1]), 100, 4, seed=2**63 - 1).shape == (4,)
    assert sample_negatives(torch.tensor([1]), 100, 4, seed=-(2**63)).shape == (4,)


# ---- complex NaN ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [complex(float("nan"), 0), complex(0, float("inf")), complex(float("nan"), 1)])
def test_complex_nan_and_inf_fail_the_finite_check(value):
    spec = PayloadSpec({"z": TensorSpec(torch.complex64, (3,))})
    raw = pl.encode({"z": torch.tensor([1 + 1j, value, 0j], dtype=torch.complex64)})
    with pytest.raises(PayloadError, match="NaN or inf"):
        pl.decode(raw, spec)
    assert pl.decode(pl.encode({"z": torch.ones(3, dtype=torch.complex64)}), spec)["z"].shape == (3,)


# ---- the other readers (libsvm shares the XC line parser; .npz) ------------------------------------
@pytest.mark.parametrize(
    "line, what",
    [
        ("1 3:nan", "not a finite"),
        ("1 \u0663:1", "bad feature"),
        (f"1 {10**30}:1", "out of range"),
        (f"{2**26} 1:1", "out of range"),
    ],
)
def test_libsvm_rejects_what_xc_rejects_and_huge_ids(tmp_path, line, what):
    from fedkernels.data.formats import read_libsvm

    f = tmp_path / "bad.svm"
    f.write_text(f"0 1:1\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{f}:2: .*{what}"):
        read_libsvm(f)


def test_npz_rejects_non_finite_features(tmp_path):
    import numpy as np
    import scipy.sparse as sp

    from fedkernels.data.formats import read_npz

    x = sp.csr_matrix(np.array([[1.0, np.nan], [0.0, 1e39]]))
    y = sp.csr_matrix(np.eye(2))
    sp.save_npz(tmp_path / "a_X.npz", x)
    sp.save_npz(tmp_path / "a_Y.npz", y)
    with pytest.raises(ValueError, match=r"a_X\.npz: NaN or inf"):
        read_npz(tmp_path / "a_X.npz", tmp_path / "a_Y.npz")
