"""The synthetic extreme-classification generator: power-law label frequencies, topic co-occurrence,
sparse predictive features, determinism, validation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedkernels.data import XCSpec, iter_synthetic_xc, synthetic_xc
from fedkernels.data.xc_synthetic import CHUNK, class_topics, class_weights

SPEC = XCSpec(num_samples=20000, num_features=2**15, num_classes=5000, num_topics=100, seed=0)


@pytest.fixture(scope="module")
def data():
    return synthetic_xc(SPEC)


def _slope(counts: np.ndarray, lo: int, hi: int) -> float:
    """Least-squares slope of log frequency against log rank over ranks lo..hi (1-based)."""
    srt = np.sort(counts)[::-1][lo - 1 : hi]
    return float(np.polyfit(np.log(np.arange(lo, hi + 1)), np.log(srt), 1)[0])


def test_shapes_and_sparsity(data):
    assert data.features.shape == (20000, 2**15) and data.labels.shape == (20000, 5000)
    assert data.features.dtype == np.float32 and sp.isspmatrix_csr(data.features)
    nnz = np.diff(data.features.indptr)
    assert 150 <= nnz.mean() <= 300 and nnz.min() >= 1  # a few hundred of 32768 columns
    norms = np.sqrt(np.asarray(data.features.multiply(data.features).sum(1)).ravel())
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
    labels_per = np.diff(data.labels.indptr)
    assert labels_per.min() >= 1 and 2.5 <= labels_per.mean() <= 4.0  # 1 + Poisson(3) draws, repeats merged
    assert set(np.unique(data.labels.data)) == {1.0}


@pytest.mark.parametrize("exponent", [0.7, 1.0, 1.3])
def test_power_law_slope(exponent):
    """Label frequency against rank falls with slope near -exponent (ranks 10..1000; the head is
    flattened a little because a label drawn twice for one sample counts once)."""
    d = synthetic_xc(XCSpec(num_samples=20000, num_features=4096, num_classes=5000, num_topics=100, exponent=exponent))
    counts = np.bincount(d.labels.indices, minlength=5000)
    assert abs(_slope(counts, 10, 1000) + exponent) < 0.2
    # the expected shape: the generator's own weights have exactly that slope
    weights = class_weights(XCSpec(exponent=exponent, num_classes=5000, num_topics=100))
    assert abs(_slope(weights, 10, 1000) + exponent) < 1e-6


def _lift(labels: sp.csr_matrix, cols: np.ndarray) -> np.ndarray:
    """Observed co-occurrence over the independent expectation N P(a) P(b), for the pairs of ``cols``."""
    y = labels.tocsc()[:, cols]
    joint = (y.T @ y).toarray().astype(np.float64)
    f = np.asarray(y.sum(0)).ravel()
    return joint / np.maximum(np.outer(f, f) / labels.shape[0], 1e-12)


def test_cooccurrence_above_independent(data):
    """Frequent labels of one topic co-occur several times more often than independence predicts;
    with one topic (labels drawn independently) the lift is about 1."""
    counts = np.bincount(data.labels.indices, minlength=5000)
    top = np.argsort(-counts)[:300]
    lift = _lift(data.labels, top)
    topic = class_topics(SPEC)[top]
    same = (topic[:, None] == topic[None, :]) & ~np.eye(top.size, dtype=bool)
    assert same.sum() > 50
    assert np.median(lift[same]) > 3.0
    indep = synthetic_xc(XCSpec(num_samples=20000, num_features=4096, num_classes=5000, num_topics=1, seed=0))
    c2 = np.bincount(indep.labels.indices, minlength=5000)
    top2 = np.argsort(-c2)[:30]  # frequent enough for a stable ratio
    lift2 = _lift(indep.labels, top2)[~np.eye(30, dtype=bool)]
    assert 0.6 < np.median(lift2) < 1.4


def test_features_predict_labels(data):
    """A nearest-centroid classifier (unit-norm class centroids of the training features) ranks a
    true label first far more often than always answering the most frequent label."""
    x, y = data.features, data.labels
    train, test = slice(0, 15000), slice(15000, 20000)
    centroid = sp.csr_matrix(y[train].T @ x[train])  # [p, F], sparse
    norms = np.sqrt(np.asarray(centroid.multiply(centroid).sum(1)).ravel())
    centroid = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ centroid
    top1 = (x[test] @ centroid.T).toarray().argmax(1)
    yt = y[test].tocsr()

    def precision_at_1(pred: np.ndarray) -> float:
        return float(np.mean([pred[i] in yt.indices[yt.indptr[i] : yt.indptr[i + 1]] for i in range(yt.shape[0])]))

    head = np.bincount(y[train].indices, minlength=y.shape[1]).argmax()
    baseline = precision_at_1(np.full(yt.shape[0], head))
    assert baseline < 0.3
    assert precision_at_1(top1) > max(0.8, 3 * baseline)


def test_deterministic_and_seeded():
    spec = XCSpec(num_samples=CHUNK + 300, num_features=1000, num_classes=800, num_topics=20, seed=3)
    a, b = synthetic_xc(spec), synthetic_xc(spec)
    for m, n in ((a.features, b.features), (a.labels, b.labels)):
        assert (m != n).nnz == 0 and np.array_equal(m.indices, n.indices)
    c = synthetic_xc(XCSpec(**{**spec.__dict__, "seed": 4}))
    assert (a.labels != c.labels).nnz > 0
    # streaming: the chunks are the rows of the whole, in order
    chunks = list(iter_synthetic_xc(spec))
    assert [ch.num_samples for ch in chunks] == [CHUNK, 300]
    assert (sp.vstack([ch.features for ch in chunks]).tocsr() != a.features).nnz == 0


def test_keywords_and_empty():
    d = synthetic_xc(num_samples=0, num_features=10, num_classes=5, num_topics=2)
    assert d.features.shape == (0, 10) and d.labels.shape == (0, 5)
    with pytest.raises(ValueError, match="either spec or keyword"):
        synthetic_xc(XCSpec(), num_samples=3)


@pytest.mark.parametrize(
    "kw, name",
    [
        ({"num_classes": 0}, "num_classes"),
        ({"num_samples": -1}, "num_samples"),
        ({"num_features": 2.5}, "num_features"),
        ({"num_topics": 10, "num_classes": 5}, "num_topics"),
        ({"labels_per_sample": 0.5}, "labels_per_sample"),
        ({"exponent": -1.0}, "exponent"),
        ({"label_noise": 1.5}, "label_noise"),
        ({"label_token_share": 0.8, "topic_token_share": 0.5}, "label_token_share"),
        ({"tokens_per_class": 0}, "tokens_per_class"),
    ],
)
def test_bad_arguments(kw, name):
    with pytest.raises(ValueError, match=name):
        synthetic_xc(**{"num_classes": 50, "num_topics": 5, **kw})
