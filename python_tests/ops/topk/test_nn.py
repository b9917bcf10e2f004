"""The nn heads' fused top-k: SampledSoftmaxHead.predict_topk and sequential_topk against the dense
scores' ranking (random float data: the same classes on every row)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedkernels import linear_topk
from fedkernels.nn import SampledSoftmaxHead, sequential_topk


def test_sampled_softmax_head_predict_topk():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(50, 8, generator=g)
    pos, neg = torch.tensor([40, 3]), torch.tensor([7, 11, 25, 30])
    head = SampledSoftmaxHead.gather(W, pos, neg, num_classes=50, scale=2.0)
    h = torch.randn(9, 8, generator=g)
    values, classes = head.predict_topk(h, 3)
    scores = 2.0 * h @ head.weight.detach().T
    want = scores.topk(3, dim=1)
    assert torch.equal(classes, head.class_ids[want.indices])
    torch.testing.assert_close(values, want.values)
    assert set(classes.flatten().tolist()) <= {40, 3, 7, 11, 25, 30}


def test_sequential_topk():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 700))
    x = torch.randn(20, 12)
    values, classes = sequential_topk(model, x, 6)
    with torch.no_grad():
        want = model(x).topk(6, dim=1)
    assert torch.equal(classes, want.indices)
    torch.testing.assert_close(values, want.values)
    values, classes = sequential_topk(nn.Sequential(nn.Linear(12, 30)), x, 30)  # one layer: x is the input
    assert classes.shape == (20, 30)
    with pytest.raises(TypeError, match=r"last layer is an nn\.Linear"):
        sequential_topk(nn.Sequential(nn.Linear(12, 3), nn.ReLU()), x, 2)


@pytest.mark.parametrize("layout", [torch.sparse_csr, torch.sparse_coo])
def test_sequential_topk_sparse_input_in_row_blocks(layout, monkeypatch):
    """A model without hidden layers gets the sparse input at its last layer (fedkernels run --sparse):
    rows are densified a block at a time (blocks of 3 rows here): linear_topk of each dense block, the
    whole dense input's classes, and the dense logits' ranking."""
    import fedkernels.nn.topk as nn_topk

    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(40, 90))
    dense = torch.randn(10, 40) * (torch.rand(10, 40) < 0.2)
    dense[4] = 0.0  # an empty row
    monkeypatch.setattr(nn_topk, "SPARSE_BLOCK_BYTES", 3 * 40 * 4)
    sparse = dense.to_sparse_csr() if layout == torch.sparse_csr else dense.to_sparse()
    values, classes = sequential_topk(model, sparse, 5)
    head = model[0]
    blocks = [linear_topk(dense[i : i + 3], head.weight, head.bias, k=5) for i in range(0, 10, 3)]
    assert torch.equal(values, torch.cat([b[0] for b in blocks]))
    assert torch.equal(classes, torch.cat([b[1] for b in blocks]))
    # One GEMM over all rows may round differently from GEMMs of 3 rows (cuBLAS and the emulator's
    # host mm pick kernels by row count), so against the whole dense input: same classes, close values.
    whole_v, whole_c = sequential_topk(model, dense, 5)
    assert torch.equal(classes, whole_c)
    torch.testing.assert_close(values, whole_v)
    with torch.no_grad():
        ref = model(dense).double().topk(5, dim=1)
    torch.testing.assert_close(values.double(), ref.values, rtol=1e-5, atol=1e-5)
    empty = sequential_topk(model, dense[:0].to_sparse_csr(), 5)
    assert empty[0].shape == (0, 5) and empty[1].shape == (0, 5)
