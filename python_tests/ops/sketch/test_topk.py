"""bucket_merge_topk: the fused top-k against sort of the reference scores."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import sketch_ref
from python_tests.support.paths import ROOT
from python_tests.support.sketch_strategies import assert_same, bucket_scores, merge_problems, with_threads


def _check(logp, table, k, reduce):
    values, indices = fedkernels.bucket_merge_topk(logp, table, k, reduce)
    want_v, want_i = sketch_ref.bucket_merge_topk(logp.cpu(), table.cpu(), k, reduce)
    assert indices.dtype == torch.int64
    assert_same(values, want_v)
    assert torch.equal(indices.cpu(), want_i)


@given(prob=merge_problems(), k_frac=st.floats(0, 1))
def test_matches_reference(prob, k_frac):
    hf = HashFamily(prob["r"], prob["b"], prob["seed"])
    table = hf.table(prob["p"])
    logp = bucket_scores((prob["r"], prob["n"], prob["b"]), prob["dtype"], prob["seed"], prob["ties"], prob["specials"])
    _check(logp, table, round(k_frac * prob["p"]), prob["reduce"])


@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 40),
    r=st.integers(1, 5),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    ties=st.booleans(),
)
def test_many_classes_exercise_pruning(seed, k, r, dtype, ties):
    # p >> k, so the heap fills early and most classes go through the exact bound test.
    hf = HashFamily(r, 300, seed)
    logp = bucket_scores((r, 3, 300), dtype, seed, ties=ties)
    _check(logp, hf.table(5000), k, "mean")


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_on_device(device, reduce):
    hf = HashFamily(4, 250, seed=3)
    logp = bucket_scores((4, 6, 250), torch.float32, 1, specials=True)
    _check(logp.to(device), hf.table(3993, device=device), 10, reduce)


def test_nan_counts_as_largest_like_torch_topk():
    # class ids 0..3 in bucket ids 0..3 of a single table; NaN at classes 1 and 3.
    logp = torch.tensor([[[0.5, float("nan"), 2.0, float("nan")]]])
    table = torch.arange(4, dtype=torch.int32).view(4, 1)
    values, indices = fedkernels.bucket_merge_topk(logp, table, 3, "mean")
    assert indices.tolist() == [[1, 3, 2]]
    assert values[0, :2].isnan().all() and values[0, 2] == 2.0
    tv, ti = torch.topk(logp[0], 3)
    assert tv[0, :2].isnan().all() and sorted(ti[0, :2].tolist()) == [1, 3] and ti[0, 2] == 2


def test_ties_go_to_smaller_class():
    logp = torch.zeros(2, 1, 5)
    table = torch.tensor([[0, 0], [1, 1], [2, 2], [3, 3], [4, 4], [0, 0]], dtype=torch.int32)
    _, indices = fedkernels.bucket_merge_topk(logp, table, 6, "mean")
    assert indices.tolist() == [[0, 1, 2, 3, 4, 5]]


def test_k_edges():
    hf = HashFamily(3, 10, seed=1)
    logp, table = bucket_scores((3, 4, 10), torch.float32, 0), hf.table(25)
    v, i = fedkernels.bucket_merge_topk(logp, table, 0)
    assert v.shape == (4, 0) and i.shape == (4, 0)
    _check(logp, table, 25, "mean")  # k = p
    _check(logp, table, 25, "median")
    v, i = fedkernels.bucket_merge_topk(torch.zeros(3, 0, 10), table, 5)
    assert v.shape == (0, 5) and i.shape == (0, 5)


@pytest.mark.parametrize("k, match", [(26, "k must be <="), (-1, "k must be >= 0")])
def test_bad_k(k, match):
    hf = HashFamily(3, 10, seed=1)
    with pytest.raises(ValueError, match=match):
        fedkernels.bucket_merge_topk(torch.zeros(3, 2, 10), hf.table(25), k)


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((torch.zeros(3, 2, 10, dtype=torch.int32), 2, "mean"), ValueError, "logp"),
        ((torch.zeros(2, 2, 10), 2, "mean"), ValueError, "logp"),
        ((torch.zeros(3, 2, 9), 2, "mean"), IndexError, "table"),
        ((torch.zeros(3, 2, 10), 2, "avg"), ValueError, "reduce"),
    ],
)
def test_bad_input(args, exc, match):
    hf = HashFamily(3, 10, seed=1)
    logp, k, reduce = args
    with pytest.raises(exc, match=match):
        fedkernels.bucket_merge_topk(logp, hf.table(25), k, reduce)


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_opcheck(reduce):
    hf = HashFamily(3, 9, seed=5)
    torch.library.opcheck(
        torch.ops.fedkernels.bucket_merge_topk.default, (torch.randn(3, 4, 9), hf.table(30), 7, reduce)
    )


def test_compile_fullgraph():
    hf = HashFamily(4, 100, seed=6)
    logp, table = bucket_scores((4, 5, 100), torch.float32, 2), hf.table(1000)

    def predict(lp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return fedkernels.bucket_merge_topk(torch.nn.functional.logsigmoid(lp), table, 8, "mean")

    compiled = torch.compile(predict, fullgraph=True)
    got_v, got_i = compiled(logp)
    want_v, want_i = predict(logp)
    assert_same(got_v, want_v)
    assert torch.equal(got_i, want_i)


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_deterministic_across_threads(reduce):
    hf = HashFamily(4, 1000, seed=2)
    logp, table = bucket_scores((4, 64, 1000), torch.float32, 3, ties=True), hf.table(30938)
    a = with_threads(1, lambda: fedkernels.bucket_merge_topk(logp, table, 20, reduce))
    b = with_threads(2, lambda: fedkernels.bucket_merge_topk(logp, table, 20, reduce))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ---- the CUDA kernel's paths (merge_topk_cuda.cu): fast path (k <= 8, k <= 32: per-thread lists and a
# block merge), split rows (few rows, many classes: a second merge pass), rows staged in shared memory or
# not (R * B > 8192), and the general path (k > 32 or float64: bisection, compaction, bitonic sort).
# On the CPU they are more cases of the same contract.


def _scores(shape, dtype, seed, ties, values):
    """bucket_scores, or with +-inf but no NaN ("inf": inf - inf makes NaN scores in NaN-free rows)."""
    if values != "inf":
        return bucket_scores(shape, dtype, seed, ties, specials=values == "nan")
    x = bucket_scores(shape, torch.float64, seed, ties)
    pick = torch.rand(shape, generator=torch.Generator().manual_seed(seed + 1))
    x = torch.where(pick < 0.04, torch.tensor(float("inf"), dtype=x.dtype), x)
    x = torch.where((pick >= 0.04) & (pick < 0.08), torch.tensor(float("-inf"), dtype=x.dtype), x)
    return x.to(dtype)


@st.composite
def topk_paths(draw):
    p = draw(st.one_of(st.integers(1, 300), st.integers(4000, 9000)))
    k = draw(st.one_of(st.just(1), st.integers(2, 8), st.integers(9, 32), st.integers(33, 90), st.just(p)))
    return dict(
        p=p,
        k=min(k, p),
        r=draw(st.integers(1, 8)),
        n=draw(st.sampled_from([1, 2, 3, 7])),
        b=draw(st.sampled_from([1, 5, 40, 1100, 3000])),
        dtype=draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16, torch.float64])),
        reduce=draw(st.sampled_from(["mean", "median"])),
        seed=draw(st.integers(0, 2**32 - 1)),
        ties=draw(st.booleans()),
        values=draw(st.sampled_from(["plain", "nan", "inf"])),
    )


@given(prob=topk_paths())
def test_kernel_paths_match_reference(prob):
    hf = HashFamily(prob["r"], prob["b"], prob["seed"])
    logp = _scores((prob["r"], prob["n"], prob["b"]), prob["dtype"], prob["seed"], prob["ties"], prob["values"])
    _check(logp, hf.table(prob["p"]), prob["k"], prob["reduce"])


@pytest.mark.parametrize("k", [1, 5, 8, 9, 32, 33, 100])
@pytest.mark.parametrize("values", ["plain", "inf"])
def test_split_rows(k, values):
    # one and two rows of 20000 classes: the fast path splits each row over several blocks
    hf = HashFamily(4, 500, seed=k)
    for n in (1, 2):
        logp = _scores((4, n, 500), torch.float32, k + n, ties=k % 2 == 0, values=values)
        _check(logp, hf.table(20000), k, "mean")


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_many_rows_one_block_each(reduce):
    # N >= 528: one block per row, no split; rows of p = 300 < 256 * 2 classes, ties and NaN rows
    hf = HashFamily(3, 50, seed=9)
    logp = bucket_scores((3, 600, 50), torch.float32, 4, ties=True, specials=True)
    _check(logp, hf.table(300), 5, reduce)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_ties_and_all_nan(dtype):
    # every score equal (order is by class id), every score NaN, a row of one value: each k path
    hf = HashFamily(2, 30, seed=1)
    table = hf.table(700)
    for fill in (0.0, -0.0, float("nan"), float("-inf")):
        logp = torch.full((2, 3, 30), fill, dtype=dtype)
        for k in (1, 8, 32, 33, 700):
            _check(logp, table, k, "mean")
            _check(logp, table, k, "median")


@pytest.mark.parametrize("p", [3000, 20000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_nan_score_in_nan_free_row(p, dtype):
    # No NaN in logp, but +inf + -inf makes one class's mean NaN, which ranks first. Every other class
    # scores +inf, so a pruning bound of +inf must not exclude anything (the NaN class comes last).
    logp = torch.tensor([[float("inf"), 0.0], [0.0, float("-inf")]], dtype=dtype).view(2, 1, 2).repeat(1, 2, 1)
    table = torch.zeros(p, 2, dtype=torch.int32)
    table[-1, 1] = 1
    for k in (1, 5, 40):
        _check(logp, table, k, "mean")
    values, indices = fedkernels.bucket_merge_topk(logp, table, 2, "mean")
    assert indices[:, 0].tolist() == [p - 1, p - 1] and values[:, 0].isnan().all()


def test_signed_zeros_tie_by_id():
    # -0.0 and +0.0 compare equal: ties to the smaller id whatever the sign
    logp = torch.tensor([[[0.0, -0.0, 0.0, -0.0, -1.0]]])
    table = torch.tensor([[1], [0], [3], [2], [4], [0]], dtype=torch.int32)
    for k in (1, 3, 6):
        _check(logp, table, k, "mean")
    _, i = fedkernels.bucket_merge_topk(logp, table, 6, "mean")
    assert i.tolist() == [[0, 1, 2, 3, 5, 4]]


def _bench_sketch():
    import importlib.util

    path = ROOT / "bench" / "ops" / "sketch.py"
    spec = importlib.util.spec_from_file_location("fk_bench_sketch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.emu_direct
def test_launch_shapes_at_bench_configs():
    """The CUDA launch at the bench sizes (k = 5) is what bench/ops/sketch.py's table reports: at N = 1024
    one 8-warp block per row, no split; at N = 256 and N = 1 rows split over blocks and a merge pass.
    Runs only with the emulator loaded."""
    from python_tests import conftest

    if not conftest.EMULATING:
        pytest.skip("needs the CUDA emulator (--emulate-cuda)")
    from emu import cuda_emulator

    bench = _bench_sketch()
    for p, r, b in bench.CONFIGS:
        table = HashFamily(r, b, seed=0).table(p)
        for n in (1024, 256, 1):
            want = bench.topk_cuda_launch(p, r, b, n, 5)
            with cuda_emulator.routed_to_cuda(), cuda_emulator.recording(execute=False) as launches:
                torch.ops.fedkernels.bucket_merge_topk(torch.zeros(r, n, b), table, 5, "mean")
            expect = [("topk_scan_kernel", (want["blocks"], 1, 1), (256, 1, 1))]
            if want["splits"] > 1:
                expect.append(("topk_merge_kernel", (n, 1, 1), (want["merge_threads"], 1, 1)))
            assert launches == expect
            if n == 1024:
                assert want["splits"] == 1 and want["warps_per_SM"] >= 4 and want["resident_warps_per_SM"] >= 4
