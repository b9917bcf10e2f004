"""bucket_merge (mean/median) and its backward against the reference, with bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

import fedkernels
from fedkernels import HashFamily
from python_tests.reference import sketch_ref
from python_tests.support.op_errors import raw_op_raises
from python_tests.support.sketch_strategies import assert_same, bucket_scores, merge_problems, with_threads


@given(prob=merge_problems())
def test_matches_reference(prob):
    hf = HashFamily(prob["r"], prob["b"], prob["seed"])
    table = hf.table(prob["p"])
    logp = bucket_scores((prob["r"], prob["n"], prob["b"]), prob["dtype"], prob["seed"], prob["ties"], prob["specials"])
    got = fedkernels.bucket_merge(logp, table, prob["reduce"])
    assert_same(got, sketch_ref.bucket_merge(logp, table, prob["reduce"]))


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_on_device(device, reduce):
    hf = HashFamily(4, 250, seed=3)
    logp = bucket_scores((4, 5, 250), torch.float32, 1)
    got = fedkernels.bucket_merge(logp.to(device), hf.table(3993, device=device), reduce)
    assert got.device.type == device
    assert_same(got, sketch_ref.bucket_merge(logp, hf.table(3993), reduce))


def test_median_even_count_is_mean_of_middle():
    # one class, R = 4 tables, bucket 0 everywhere: median of [4, 1, 3, 2] = (2 + 3) / 2
    logp = torch.tensor([4.0, 1.0, 3.0, 2.0]).view(4, 1, 1)
    table = torch.zeros(1, 4, dtype=torch.int32)
    assert fedkernels.bucket_merge(logp, table, "median").item() == 2.5
    assert fedkernels.bucket_merge(logp, table, "mean").item() == 2.5
    logp[1] = float("nan")
    assert fedkernels.bucket_merge(logp, table, "median").isnan().all()


def test_one_class_and_empty():
    hf = HashFamily(3, 7, seed=0)
    assert fedkernels.bucket_merge(torch.zeros(3, 0, 7), hf.table(5)).shape == (0, 5)
    assert fedkernels.bucket_merge(torch.zeros(3, 2, 7), hf.table(0)).shape == (2, 0)
    logp = bucket_scores((3, 2, 7), torch.float32, 0)
    assert_same(fedkernels.bucket_merge(logp, hf.table(1)), sketch_ref.bucket_merge(logp, hf.table(1), "mean"))


@given(prob=merge_problems(max_p=60))
def test_backward_matches_reference(prob):
    hf = HashFamily(prob["r"], prob["b"], prob["seed"])
    table = hf.table(prob["p"])
    logp = bucket_scores((prob["r"], prob["n"], prob["b"]), prob["dtype"], prob["seed"]).requires_grad_()
    out = fedkernels.bucket_merge(logp, table, "mean")
    grad = bucket_scores(out.shape, prob["dtype"], prob["seed"] + 1)
    (got,) = torch.autograd.grad(out, logp, grad)
    assert_same(got, sketch_ref.bucket_merge_backward(grad, table, prob["b"]))


def test_gradcheck_mean_float64():
    hf = HashFamily(3, 6, seed=4)
    logp = torch.randn(3, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: fedkernels.bucket_merge(x, hf.table(20), "mean"), (logp,))
    assert torch.autograd.gradgradcheck(lambda x: fedkernels.bucket_merge(x, hf.table(20), "mean"), (logp,))


def test_median_not_differentiable():
    hf = HashFamily(3, 6, seed=4)
    logp = torch.randn(3, 4, 6, requires_grad=True)
    out = fedkernels.bucket_merge(logp, hf.table(20), "median")
    with pytest.raises(RuntimeError, match="reduce='mean'"):
        out.sum().backward()


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_opcheck(reduce):
    hf = HashFamily(3, 9, seed=5)
    logp = torch.randn(3, 4, 9, requires_grad=reduce == "mean")
    torch.library.opcheck(torch.ops.fedkernels.bucket_merge.default, (logp, hf.table(30), reduce))
    torch.library.opcheck(torch.ops.fedkernels.bucket_merge_backward.default, (torch.randn(4, 30), hf.table(30), 9))


def test_compile_fullgraph():
    hf = HashFamily(4, 50, seed=6)
    logp, table = bucket_scores((4, 3, 50), torch.float32, 2), hf.table(300)
    compiled = torch.compile(fedkernels.bucket_merge, fullgraph=True)
    assert_same(compiled(logp, table, "mean"), fedkernels.bucket_merge(logp, table, "mean"))


@pytest.mark.parametrize("reduce", ["mean", "median"])
def test_deterministic_across_threads(reduce):
    hf = HashFamily(4, 1000, seed=2)
    logp, table = bucket_scores((4, 64, 1000), torch.float32, 3), hf.table(30938)
    a = with_threads(1, lambda: fedkernels.bucket_merge(logp, table, reduce))
    b = with_threads(2, lambda: fedkernels.bucket_merge(logp, table, reduce))
    assert torch.equal(a, b)
    logp.requires_grad_()
    grad = torch.randn(64, 30938)
    ga = with_threads(1, lambda: torch.autograd.grad(fedkernels.bucket_merge(logp, table), logp, grad)[0])
    gb = with_threads(2, lambda: torch.autograd.grad(fedkernels.bucket_merge(logp, table), logp, grad)[0])
    assert torch.equal(ga, gb)


def _args():
    hf = HashFamily(3, 8, seed=1)
    return torch.randn(3, 2, 8), hf.table(10)


@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda lp, t: (lp.long(), t, "mean"), ValueError, "logp"),
        (lambda lp, t: (lp[0], t, "mean"), ValueError, "logp"),
        (lambda lp, t: (lp[:2], t, "mean"), ValueError, "logp"),  # R mismatch
        (lambda lp, t: (lp[:, :, :0], t, "mean"), ValueError, "logp"),  # B = 0
        (lambda lp, t: (lp, t.float(), "mean"), ValueError, "table"),
        (lambda lp, t: (lp, t[:, :0], "mean"), ValueError, "table"),  # R = 0
        (lambda lp, t: (lp, t[0], "mean"), ValueError, "table"),
        (lambda lp, t: (lp, t.clone().fill_(8), "mean"), IndexError, "table"),  # bucket >= B
        (lambda lp, t: (lp, t.clone().fill_(-1), "mean"), IndexError, "table"),
        (lambda lp, t: (lp, t, "max"), ValueError, "reduce"),
        (lambda lp, t: (torch.randn(65, 2, 8), torch.zeros(10, 65, dtype=torch.int32), "median"), ValueError, "median"),
    ],
)
def test_bad_input(mutate, exc, match):
    with pytest.raises(exc, match=match):
        fedkernels.bucket_merge(*mutate(*_args()))


def test_bad_backward_input():
    _, t = _args()
    with raw_op_raises(ValueError, "grad"):
        torch.ops.fedkernels.bucket_merge_backward(torch.randn(2, 9), t, 8)
    with raw_op_raises(ValueError, "num_buckets"):
        torch.ops.fedkernels.bucket_merge_backward(torch.randn(2, 10), t, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU for a second device")
def test_wrong_device():
    lp, t = _args()
    with pytest.raises(ValueError, match="same device"):
        fedkernels.bucket_merge(lp.cuda(), t, "mean")
