"""linear_topk against dense float64 scores (python_tests/reference/topk_ref.py): values within the
float32 error bound, indices exact wherever the scores are separated, the stated tie and NaN rules on
exactly computable data, edge shapes, strided inputs, bad input, opcheck and torch.compile."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from python_tests.reference import topk_ref
from python_tests.support.cpu_levels import at_level


def assert_valid_topk(h, W, bias, k, scale, values, indices):
    """Every property of the op's output that holds whatever the rounding of its float32 scores."""
    n, p = h.shape[0], W.shape[0]
    assert values.shape == (n, k) and indices.shape == (n, k)
    assert values.dtype == torch.float32 and indices.dtype == torch.int64
    if n == 0 or k == 0:
        return
    values, indices = values.cpu(), indices.cpu()
    h, W = h.cpu(), W.cpu()
    bias = bias.cpu() if bias is not None else None
    s = topk_ref.dense_scores(h, W, bias, scale)
    err = topk_ref.score_error_bound(h, W, bias, scale)
    assert int(indices.min()) >= 0 and int(indices.max()) < p
    assert all(len(set(row)) == k for row in indices.tolist()), "a class twice in one row"
    sv, ev = s.gather(1, indices), err.gather(1, indices)
    nan = torch.isnan(sv)
    assert torch.equal(torch.isnan(values), nan)
    assert bool(((values.double() - sv).abs() <= ev)[~nan].all()), "a value is not its class's score"
    # Output order: NaN first, then non-increasing values, equal values by ascending class id.
    v, i = values.double(), indices
    for c in range(k - 1):
        a_nan, b_nan = nan[:, c], nan[:, c + 1]
        ok = torch.where(
            a_nan | b_nan,
            a_nan & (~b_nan | (i[:, c] < i[:, c + 1])),
            (v[:, c] > v[:, c + 1]) | ((v[:, c] == v[:, c + 1]) & (i[:, c] < i[:, c + 1])),
        )
        assert bool(ok.all()), f"rank {c} and {c + 1} out of order"
    # Nothing left out ranks certainly above the k-th kept class.
    left_out = torch.ones(n, p, dtype=torch.bool)
    left_out.scatter_(1, indices, False)
    if bool(left_out.any()):
        kth_hi = (sv[:, -1] + ev[:, -1]).unsqueeze(1)
        lo = (s - err).masked_fill(~left_out | torch.isnan(s), -float("inf"))
        assert bool((lo <= kth_hi).masked_fill(nan[:, -1:].expand(n, p), True).all()), "a better class left out"
        assert not bool((torch.isnan(s) & left_out).any() & ~nan.all()), "a NaN score left out before a number"
    # Where the exact scores are separated by more than the error bound, the indices are the reference's.
    ref_order = torch.from_numpy(topk_ref.topk_order(s))
    ref_s = s.gather(1, ref_order)
    e_max = err.max(1, keepdim=True).values
    gap_next = torch.cat([ref_s[:, :-1] - ref_s[:, 1:], torch.full((n, 1), float("inf"))], 1)
    gap_prev = torch.cat([torch.full((n, 1), float("inf")), gap_next[:, :-1]], 1)
    certain = (gap_next > 2 * e_max) & (gap_prev > 2 * e_max)
    certain = certain[:, :k] & ~torch.isnan(ref_s[:, :k])
    assert torch.equal(indices[certain], ref_order[:, :k][certain])


def _inputs(case):
    g = torch.Generator().manual_seed(case["seed"])
    n, d, p = case["n"], case["d"], case["p"]
    h = torch.randn(n, d, generator=g).to(case["dtype"])
    W = torch.randn(p, d, generator=g).to(case["dtype"])
    bias = None
    if case["bias"] is not None:
        bias = (2 * torch.randn(p, generator=g)).to(torch.float32 if case["bias"] == "float32" else case["dtype"])
    if case["dups"] and p > 2:  # duplicate classes: exact ties, to the smaller id
        W[p - 1] = W[0]
        W[p // 2] = W[0]
        if bias is not None:
            bias[p - 1] = bias[0]
            bias[p // 2] = bias[0]
    return h, W, bias


@st.composite
def topk_case(draw):
    p = draw(st.integers(0, 300))
    return dict(
        n=draw(st.integers(0, 13)),
        # large d gives small tiles (2049: 16 classes a tile), so p up to 300 spans many tiles
        d=draw(st.one_of(st.integers(0, 40), st.sampled_from([257, 512, 2049]))),
        p=p,
        k=draw(st.integers(0, p)),
        dtype=draw(st.sampled_from([torch.float32, torch.bfloat16])),
        bias=draw(st.sampled_from([None, "float32", "same"])),
        scale=draw(st.sampled_from([1.0, 0.5, -3.0, 16.0])),
        dups=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31)),
    )


@given(topk_case())
def test_matches_float64_reference(case):
    h, W, bias = _inputs(case)
    values, indices = fedkernels.linear_topk(h, W, bias, k=case["k"], scale=case["scale"])
    assert_valid_topk(h, W, bias, case["k"], case["scale"], values, indices)


@st.composite
def integer_case(draw):
    """Small integers: every float32 score is exact, so the output must equal the reference exactly
    (ties to the smaller id at every rank, NaN first)."""
    p = draw(st.integers(1, 200))
    return dict(
        n=draw(st.integers(1, 9)),
        d=draw(st.integers(0, 24)),
        p=p,
        k=draw(st.integers(0, p)),
        bias=draw(st.booleans()),
        nan=draw(st.sampled_from(["none", "h", "W", "bias", "inf"])),
        seed=draw(st.integers(0, 2**31)),
    )


@given(integer_case())
def test_exact_scores_give_reference_order_and_ties(case):
    g = torch.Generator().manual_seed(case["seed"])
    n, d, p, k = case["n"], case["d"], case["p"], case["k"]
    h = torch.randint(-2, 3, (n, d), generator=g).float()
    W = torch.randint(-2, 3, (p, d), generator=g).float()
    bias = torch.randint(-3, 4, (p,), generator=g).float() if case["bias"] else None
    if case["nan"] == "h" and d > 0:
        h[0, 0] = float("nan")  # row 0: every score NaN, so its top k is classes 0 .. k-1
    elif case["nan"] == "W" and d > 0:
        W[p // 2, 0] = float("nan")  # one class NaN in every row: it ranks first
    elif case["nan"] == "bias" and bias is not None:
        bias[p - 1] = float("nan")
    elif case["nan"] == "inf" and d > 0:
        W[0, 0] = float("inf")  # +-inf scores, and NaN where h's entry is 0 (0 * inf)
    values, indices = fedkernels.linear_topk(h, W, bias, k=k, scale=2.0)
    want_v, want_i = topk_ref.linear_topk(h, W, bias, k, scale=2.0)
    assert torch.equal(indices, want_i)
    torch.testing.assert_close(values, want_v.float(), equal_nan=True, rtol=0, atol=0)


def test_constructed_ties_rank_by_class_id():
    g = torch.Generator().manual_seed(1)
    h, W = torch.randn(5, 33, generator=g), torch.randn(1000, 33, generator=g)
    best = int((h[0] @ W.T).argmax())
    for j in (7, 400, 999):  # copies of the best class, before and after it
        W[j] = W[best]
    values, indices = fedkernels.linear_topk(h, W, k=4)
    assert indices[0].tolist() == sorted([best, 7, 400, 999])
    assert values[0].unique().numel() == 1


def test_edge_shapes():
    h, W = torch.randn(3, 5), torch.randn(7, 5)
    for k in (0, 1, 7):
        v, i = fedkernels.linear_topk(h, W, k=k)
        assert v.shape == i.shape == (3, k)
        assert_valid_topk(h, W, None, k, 1.0, v, i)
    v, i = fedkernels.linear_topk(torch.randn(0, 5), W, k=3)  # N = 0
    assert v.shape == i.shape == (0, 3)
    v, i = fedkernels.linear_topk(h, torch.randn(0, 5), k=0)  # p = 0 allows only k = 0
    assert v.shape == i.shape == (3, 0)
    with pytest.raises(ValueError, match="k must be <= p"):
        fedkernels.linear_topk(h, torch.randn(0, 5), k=1)
    v, i = fedkernels.linear_topk(torch.randn(3, 0), torch.randn(7, 0), torch.arange(7.0), k=2)  # d = 0: the bias
    assert i.tolist() == [[6, 5]] * 3 and v.tolist() == [[6.0, 5.0]] * 3


def test_huge_p_small_n():
    g = torch.Generator().manual_seed(2)
    h, W, b = torch.randn(3, 8, generator=g), torch.randn(200_003, 8, generator=g), torch.randn(200_003, generator=g)
    v, i = fedkernels.linear_topk(h, W, b, k=10, scale=0.25)
    assert_valid_topk(h, W, b, 10, 0.25, v, i)


def _strided_case():
    g = torch.Generator().manual_seed(3)
    hT, WT = torch.randn(40, 11, generator=g), torch.randn(40, 300, generator=g)
    return hT.t(), WT.t(), torch.randn(600, generator=g)[::2]  # transposed views [11, 40], [300, 40]; stride-2 bias


def test_strided_and_expanded_inputs():
    h, W, b = _strided_case()
    v, i = fedkernels.linear_topk(h, W, b, k=9)
    assert_valid_topk(h, W, b, 9, 1.0, v, i)
    # expanded: every class the same row (small integers: exact scores whatever the GEMM), so all tie
    row = torch.randint(-3, 4, (1, 40), generator=torch.Generator().manual_seed(4)).float()
    v, i = fedkernels.linear_topk(h.round(), row.expand(50, 40), k=50)
    assert torch.equal(i, torch.arange(50).expand(11, 50))


def test_parameters_that_require_grad():
    """A model's parameters go in as they are (requires_grad): the detached inputs' answer (the CUDA
    launcher's GEMM once refused them: mm_out with an input that requires grad)."""
    h, W, b = _strided_case()
    Wp, bp = nn_param(W), nn_param(b)
    v, i = fedkernels.linear_topk(h, Wp, bp, k=9)
    want_v, want_i = fedkernels.linear_topk(h, W, b, k=9)
    assert torch.equal(v, want_v) and torch.equal(i, want_i)


def nn_param(t: torch.Tensor) -> torch.nn.Parameter:
    return torch.nn.Parameter(t.detach().clone())


@pytest.mark.cpu_path("the CPU kernel reads strides in place: the same bits as contiguous inputs")
def test_strided_inputs_give_the_contiguous_bits():
    h, W, b = _strided_case()
    got = fedkernels.linear_topk(h, W, b, k=9)
    want = fedkernels.linear_topk(h.contiguous(), W.contiguous(), b.contiguous(), k=9)
    assert all(torch.equal(x, y) for x, y in zip(got, want, strict=True))


@pytest.mark.cpu_path("thread counts and dispatch levels of the CPU kernel")
def test_bit_identical_across_threads_and_levels():
    g = torch.Generator().manual_seed(4)
    # By tiles of classes (many tiles) and by rows (one tile, many rows): both chunk splits.
    cases = [(64, 1100, 512), (8200, 16, 512)]
    old = torch.get_num_threads()
    try:
        for n, p, d in cases:
            h, W, b = torch.randn(n, d, generator=g), torch.randn(p, d, generator=g), torch.randn(p, generator=g)
            W[p - 1] = W[3]  # an exact tie across tiles
            torch.set_num_threads(1)
            one = fedkernels.linear_topk(h, W, b, k=5)
            torch.set_num_threads(2)
            two = fedkernels.linear_topk(h, W, b, k=5)
            with at_level("generic"):
                portable = fedkernels.linear_topk(h[:40], W, b, k=5)
            for x, y in zip(one, two, strict=True):
                assert torch.equal(x, y)
            for x, y in zip(portable, (one[0][:40], one[1][:40]), strict=True):
                assert torch.equal(x, y)
    finally:
        torch.set_num_threads(old)


def test_on_device(device):
    g = torch.Generator().manual_seed(5)
    h, W, b = torch.randn(30, 16, generator=g), torch.randn(700, 16, generator=g), torch.randn(700, generator=g)
    v, i = fedkernels.linear_topk(h.to(device), W.to(device), b.to(device), k=6, scale=0.5)
    assert v.device.type == device
    assert_valid_topk(h, W, b, 6, 0.5, v.cpu(), i.cpu())


def _args():
    return torch.randn(4, 3), torch.randn(6, 3), torch.randn(6)


@pytest.mark.parametrize(
    "mutate, kw, exc, match",
    [
        (lambda a: (a[0].double(), a[1].double(), a[2]), {}, ValueError, "h must be float32 or bfloat16"),
        (lambda a: (a[0].long(), a[1], a[2]), {}, ValueError, "h must"),
        (lambda a: (a[0][0], a[1], a[2]), {}, ValueError, "h must be 2-D"),
        (lambda a: (a[0], a[1].bfloat16(), a[2]), {}, ValueError, "W must have the dtype of h"),
        (lambda a: (a[0], a[1][:, :2], a[2]), {}, ValueError, "W must have shape"),
        (lambda a: (a[0], a[1][0], a[2]), {}, ValueError, "W must be 2-D"),
        (lambda a: (a[0], a[1], a[2][:5]), {}, ValueError, "bias must have shape"),
        (lambda a: (a[0], a[1], a[2].double()), {}, ValueError, "bias must be float32"),
        (lambda a: a, {"k": -1}, ValueError, "k must be >= 0"),
        (lambda a: a, {"k": 7}, ValueError, "k must be <= p"),
        (lambda a: a, {"k": 2.0}, ValueError, "k must be an integer"),
        (lambda a: a, {"k": 2, "scale": float("nan")}, ValueError, "scale must be finite"),
        (lambda a: a, {"k": 2, "scale": 1e39}, ValueError, "scale must be finite"),
        (lambda a: a, {"k": 2, "scale": "2"}, ValueError, "scale must be a real number"),
        (lambda a: (a[0].numpy(), a[1], a[2]), {}, TypeError, "h must be a torch.Tensor"),
    ],
)
def test_bad_input(mutate, kw, exc, match):
    kw = {"k": 2, **kw}
    with pytest.raises(exc, match=match):
        fedkernels.linear_topk(*mutate(_args()), **kw)


def test_device_mismatch_is_refused():
    h, W, b = _args()
    # CPU inputs with a meta W dispatch to the fake kernel, which makes the launchers' device check
    with pytest.raises(ValueError, match="h and W must be on the same device"):
        fedkernels.linear_topk(h, W.to("meta"), b, k=2)
    with pytest.raises(ValueError, match="h and bias must be on the same device"):
        fedkernels.linear_topk(h, W, b.to("meta"), k=2)


def test_opcheck_and_compile():
    h, W, b = _args()
    torch.library.opcheck(torch.ops.fedkernels.linear_topk.default, (h, W, b, 3, 2.0))
    torch.library.opcheck(torch.ops.fedkernels.linear_topk.default, (h.bfloat16(), W.bfloat16(), None, 0, 1.0))
    compiled = torch.compile(lambda h, W, b: fedkernels.linear_topk(h, W, b, k=3, scale=2.0), fullgraph=True)
    got, want = compiled(h, W, b), fedkernels.linear_topk(h, W, b, k=3, scale=2.0)
    for x, y in zip(got, want, strict=True):
        assert torch.equal(x, y)
