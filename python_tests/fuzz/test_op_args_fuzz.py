"""Fuzzing the ops' argument checks with tensors in every memory layout (second hostile sweep:
``check_csr`` read a strided or expanded ``indptr`` as if contiguous, so ``[0, 2, 1e9]`` passed and
the kernel read out of bounds, and an expanded one crashed ``label_hash`` and
``sample_negatives_batched``). CSR arguments, valid or not, are passed contiguous, strided (a view
of every other element of a buffer filled with junk), offset (a view into a larger buffer),
expanded (stride 0) and overlapping (``as_strided`` windows sharing elements); the op must give
exactly what it gives their contiguous copies, or raise the same error type and message."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedkernels import HashFamily
from fedkernels.ops.sampled import sample_negatives_batched
from fedkernels.ops.sketch import label_hash
from fedkernels.ops.spread import PairWeights, pair_weight_gather

P, B = 12, 8
TABLE = HashFamily(2, B, seed=3).table(P)
JUNK = [0, -1, 10**9, 2**62, -(2**62)]


def layout(values: list[int], kind: str, junk: int) -> torch.Tensor:
    """``values`` (int64) as a tensor of the given memory layout, equal to them logically."""
    t = torch.tensor(values, dtype=torch.int64)
    n = len(values)
    if kind == "contiguous" or n == 0:
        return t
    if kind == "strided":
        buf = torch.full((2 * n,), junk, dtype=torch.int64)
        buf[::2] = t
        return buf[::2]
    if kind == "offset":
        buf = torch.full((n + 3,), junk, dtype=torch.int64)
        buf[2 : 2 + n] = t
        return buf[2 : 2 + n]
    if kind == "column":  # a column of a row-major [n, 3] matrix: stride 3
        buf = torch.full((n, 3), junk, dtype=torch.int64)
        buf[:, 1] = t
        return buf[:, 1]
    if kind == "expanded":  # only where every value is the same; else a strided one
        return t[:1].expand(n) if bool((t == t[0]).all()) else layout(values, "strided", junk)
    if kind == "overlapping":  # windows of a buffer that share elements: [a, b, c] as as_strided over [a, b, c]
        return torch.as_strided(t.clone(), (n,), (1,))
    raise AssertionError(kind)


LAYOUTS = ["contiguous", "strided", "offset", "column", "expanded", "overlapping"]


@st.composite
def csr_args(draw):
    n = draw(st.integers(0, 5))
    lens = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    indptr = [0]
    for k in lens:
        indptr.append(indptr[-1] + k)
    indices = draw(st.lists(st.integers(0, P - 1), min_size=indptr[-1], max_size=indptr[-1]))
    # break it, sometimes: a value anywhere, a wrong end, a negative index
    fault = draw(st.sampled_from(["none", "none", "ptr_value", "ptr_end", "index"]))
    if fault == "ptr_value" and len(indptr) > 1:
        indptr[draw(st.integers(0, len(indptr) - 1))] = draw(st.sampled_from([-1, 10**9, 2**62, 1]))
    elif fault == "ptr_end":
        indptr[-1] += draw(st.sampled_from([1, -1, 10**9]))
    elif fault == "index" and indices:
        indices[draw(st.integers(0, len(indices) - 1))] = draw(st.sampled_from([-1, P, 2**40]))
    return indptr, indices


def outcome(fn):
    try:
        return ("ok", fn())
    except (ValueError, IndexError, TypeError, RuntimeError) as e:
        return (type(e).__name__, str(e).split("\n")[0])


def same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "ok":
        return a[1].shape == b[1].shape and torch.equal(a[1], b[1])
    return a[1] == b[1]


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    args=csr_args(),
    ptr_layout=st.sampled_from(LAYOUTS),
    idx_layout=st.sampled_from(LAYOUTS),
    junk=st.sampled_from(JUNK),
)
def test_csr_ops_see_the_logical_values_whatever_the_layout(args, ptr_layout, idx_layout, junk):
    indptr, indices = args
    ip, ix = layout(indptr, ptr_layout, junk), layout(indices, idx_layout, junk)
    ip_c, ix_c = torch.tensor(indptr, dtype=torch.int64), torch.tensor(indices, dtype=torch.int64)
    calls = {
        "label_hash": lambda a, b: label_hash(a, b, TABLE, B),
        "sample_negatives_batched": lambda a, b: sample_negatives_batched(a, b, P, 3, seed=2),
    }
    for name, call in calls.items():
        want = outcome(lambda call=call: call(ip_c, ix_c))
        got = outcome(lambda call=call: call(ip, ix))
        assert same(got, want), (name, indptr, indices, ptr_layout, idx_layout, got[0], want[0], got[1], want[1])


@settings(max_examples=80, deadline=None, derandomize=True)
@given(ptr_layout=st.sampled_from(LAYOUTS), junk=st.sampled_from(JUNK), end=st.sampled_from([0, 1, 9]))
def test_pair_weight_gather_sees_the_logical_indptr(ptr_layout, junk, end):
    pw = PairWeights.from_pairs(torch.tensor([0, 0, 2]), torch.tensor([1, 2, 0]), torch.tensor([0.5, 0.25, 0.75]), 3)
    values = pw.indptr.tolist()
    values[-1] += end if end != 9 else 0
    idx = torch.tensor([[1, 2], [0, 2], [0, 1]])
    want = outcome(lambda: pair_weight_gather(PairWeights(torch.tensor(values), pw.indices, pw.values), idx))
    got = outcome(lambda: pair_weight_gather(PairWeights(layout(values, ptr_layout, junk), pw.indices, pw.values), idx))
    assert same(got, want), (ptr_layout, junk, end, got, want)


@pytest.mark.parametrize("alias", ["indptr", "indices"])
def test_label_hash_out_overlapping_an_input_is_refused(alias):
    indptr, indices = torch.tensor([0, 1, 2]), torch.tensor([1, 5])
    buf = torch.zeros(2 * 2 * B + 64, dtype=torch.uint8)
    out = buf[: 2 * 2 * B].view(2, 2, B)
    shared = buf[-32:].view(torch.int64)  # an input living in out's storage
    args = {"indptr": indptr, "indices": indices}
    args[alias] = shared[: args[alias].numel()].copy_(args[alias])
    with pytest.raises(ValueError, match="out must not share memory"):
        label_hash(args["indptr"], args["indices"], TABLE, B, out=out)
