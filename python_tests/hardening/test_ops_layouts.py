"""Op arguments in any memory layout (the second hostile sweep): ``check_csr`` read a non-contiguous
``indptr`` as if it were contiguous. A strided ``indptr`` whose logical values are ``[0, 2, 1e9]``
passed the check and the kernel read out of bounds; an expanded one (stride 0) crashed
``label_hash`` and ``sample_negatives_batched`` (SIGSEGV), and an error message printed a heap value
read past the tensor's storage. Now every check reads the logical values: a bad strided ``indptr``
is a ValueError naming it, and a good one, strided, expanded or a view into a larger buffer, gives
exactly what its contiguous copy gives."""

from __future__ import annotations

import pytest
import torch

from fedkernels import HashFamily
from fedkernels.ops.sampled import sample_negatives_batched
from fedkernels.ops.sketch import label_hash
from fedkernels.ops.spread import PairWeights, pair_weight_gather

P, B = 12, 8
TABLE = HashFamily(2, B, seed=3).table(P)


def strided(values: list[int], fill: int = 10**9) -> torch.Tensor:
    """``values`` as a stride-2 view whose skipped slots hold ``fill`` (what a raw read would see)."""
    buf = torch.full((2 * len(values),), fill, dtype=torch.int64)
    buf[::2] = torch.tensor(values, dtype=torch.int64)
    return buf[::2]


def test_strided_indptr_with_a_bad_last_value_is_refused_by_name():
    """The sweep's case: logical [0, 2, 1e9] over 2 indices; a raw read saw [0, 1e9, 2] ... and passed."""
    indptr = strided([0, 2, 10**9], fill=2)
    assert not indptr.is_contiguous()
    indices = torch.tensor([1, 5])
    with pytest.raises(ValueError, match=r"indptr\[-1\] must equal indices\.numel\(\) = 2, got 1000000000"):
        label_hash(indptr, indices, TABLE, B)
    with pytest.raises(ValueError, match=r"indptr\[-1\] must equal"):
        sample_negatives_batched(indptr, indices, P, 3, seed=0)


def test_strided_decreasing_indptr_is_refused():
    indptr = strided([0, 3, 1, 3], fill=0)
    with pytest.raises(ValueError, match="indptr must be non-decreasing"):
        label_hash(indptr, torch.tensor([0, 1, 2]), TABLE, B)


@pytest.mark.parametrize("layout", ["strided", "expanded", "offset_view"])
def test_good_indptr_in_any_layout_matches_its_contiguous_copy(layout):
    if layout == "strided":
        indptr = strided([0, 2, 2, 5])
    elif layout == "expanded":  # stride 0: every sample empty
        indptr = torch.zeros(1, dtype=torch.int64).expand(6)
    else:  # a view starting past the storage's first element
        indptr = torch.tensor([99, 0, 2, 2, 5], dtype=torch.int64)[1:]
    nnz = int(indptr[-1])
    indices = torch.tensor([1, 5, 0, 7, 11][:nnz], dtype=torch.int64)
    dense = indptr.contiguous()
    assert torch.equal(label_hash(indptr, indices, TABLE, B), label_hash(dense, indices, TABLE, B))
    assert torch.equal(
        sample_negatives_batched(indptr, indices, P, 3, seed=1), sample_negatives_batched(dense, indices, P, 3, seed=1)
    )


def test_expanded_indptr_error_reports_the_true_value():
    """An expanded (stride 0) zero indptr of 5 entries over 3 indices: its last value is 0, which the
    message must report (a raw read of entry 4 went past the one-element storage: a heap value)."""
    indptr = torch.zeros(1, dtype=torch.int64).expand(5)
    with pytest.raises(ValueError, match=r"indptr\[-1\] must equal indices\.numel\(\) = 3, got 0(?!\d)"):
        label_hash(indptr, torch.tensor([1, 2, 3]), TABLE, B)
    indptr = torch.full((1,), 7, dtype=torch.int64).expand(5)
    with pytest.raises(ValueError, match=r"indptr\[0\] must be 0, got 7(?!\d)"):
        label_hash(indptr, torch.tensor([1, 2, 3]), TABLE, B)


def test_strided_pair_weights_match_contiguous():
    pw = PairWeights.from_pairs(torch.tensor([0, 0, 2]), torch.tensor([1, 2, 0]), torch.tensor([0.5, 0.25, 0.75]), 3)
    indptr = strided(pw.indptr.tolist())
    idx = torch.tensor([[1, 2], [0, 2], [0, 1]])
    want = pair_weight_gather(pw, idx)
    got = pair_weight_gather(PairWeights(indptr, pw.indices, pw.values), idx)
    assert torch.equal(got, want)
    bad = strided([0, 2, 2, 9], fill=3)  # logical last value 9 != nnz 3
    with pytest.raises(ValueError, match=r"pair_weight indptr\[-1\] must equal"):
        pair_weight_gather(PairWeights(bad, pw.indices, pw.values), idx)
