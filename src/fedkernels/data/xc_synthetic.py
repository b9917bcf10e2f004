"""Synthetic extreme-classification data at the papers' label counts (10^5 to 10^6 labels).

The model of the data, all of it deterministic in ``seed``:

- **Power-law labels.** Class ``c`` has weight ``w_c ∝ (rank_c + 1) ** -exponent`` (ranks shuffled
  over ids), so a few head labels are common and most are rare, as in real XC data.
- **Co-occurrence through topics.** Every class belongs to one of ``num_topics`` latent topics.
  A sample draws a topic with probability proportional to the topic's total weight, then its labels
  from that topic in proportion to ``w_c`` (a fraction ``label_noise`` from all classes instead).
  A class's marginal frequency stays ``∝ w_c`` while labels of one topic co-occur far above the
  independent baseline ``P(a) P(b)``.
- **Sparse, predictive features.** A vocabulary of ``num_features`` tokens (repeated draws of a token
  add up, so a sample has about half as many nonzeros as draws: ~200 at the default 400). Each class owns
  ``tokens_per_class`` signature tokens and each topic ``tokens_per_topic``; a sample's
  ``features_per_sample`` token draws come from its labels' signatures (``label_token_share``), its
  topic's tokens (``topic_token_share``) and a Zipf background over the whole vocabulary (the rest).
  Values are ``log(1 + count)``, each row scaled to unit L2 norm. Never dense: memory is
  proportional to the nonzeros, and :func:`iter_synthetic_xc` yields the samples in chunks, each
  chunk from its own seeded stream, so any chunk can be made without the ones before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..seeding import numpy_rng
from .xc_format import XCData

CHUNK = 4096
"""Samples per chunk of :func:`iter_synthetic_xc` (the chunk index seeds its stream)."""


@dataclass(frozen=True)
class XCSpec:
    """Parameters of :func:`synthetic_xc` (see the module docstring for the model)."""

    num_samples: int = 10000
    num_features: int = 2**15
    num_classes: int = 131073
    num_topics: int = 1000
    labels_per_sample: float = 4.0
    features_per_sample: int = 400
    exponent: float = 1.0
    label_noise: float = 0.1
    tokens_per_class: int = 8
    tokens_per_topic: int = 64
    label_token_share: float = 0.4
    topic_token_share: float = 0.3
    seed: int = 0

    def validate(self) -> None:
        """``ValueError`` naming the first bad field."""
        ints = {
            "num_samples": (self.num_samples, 0),
            "num_features": (self.num_features, 1),
            "num_classes": (self.num_classes, 1),
            "num_topics": (self.num_topics, 1),
            "features_per_sample": (self.features_per_sample, 1),
            "tokens_per_class": (self.tokens_per_class, 1),
            "tokens_per_topic": (self.tokens_per_topic, 1),
        }
        for name, (v, lo) in ints.items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if self.num_topics > self.num_classes:
            raise ValueError(f"num_topics ({self.num_topics}) must be <= num_classes ({self.num_classes})")
        if not 1.0 <= self.labels_per_sample <= self.num_classes:
            raise ValueError(f"labels_per_sample must lie in [1, num_classes], got {self.labels_per_sample}")
        if not 0.0 <= self.exponent <= 10.0:
            raise ValueError(f"exponent must lie in [0, 10], got {self.exponent}")
        for name in ("label_noise", "label_token_share", "topic_token_share"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {v}")
        if self.label_token_share + self.topic_token_share > 1.0:
            raise ValueError(
                f"label_token_share + topic_token_share must be <= 1, got "
                f"{self.label_token_share} + {self.topic_token_share}"
            )


@dataclass
class _Structure:
    """The seeded latent structure shared by all chunks."""

    weight: np.ndarray  # float64 [p]: class weights, sum 1
    by_topic: np.ndarray  # int64 [p]: class ids sorted by topic
    cum: np.ndarray  # float64 [p]: cumulative weight along by_topic
    topic_lo: np.ndarray  # float64 [T]: cumulative weight before topic t's first class
    topic_w: np.ndarray  # float64 [T]: topic weights, sum 1
    class_tokens: np.ndarray  # int64 [p, tokens_per_class]
    topic_tokens: np.ndarray  # int64 [T, tokens_per_topic]
    topic_of: np.ndarray  # int64 [p]
    background_cum: np.ndarray  # float64 [F]: Zipf(1) cumulative over a shuffled vocabulary


def _structure(s: XCSpec) -> _Structure:
    rng = numpy_rng(s.seed, "xc-structure")
    p, t, f = s.num_classes, s.num_topics, s.num_features
    weight = np.empty(p)
    weight[rng.permutation(p)] = (np.arange(p) + 1.0) ** -s.exponent
    weight /= weight.sum()
    # every topic gets at least one class; the rest are assigned uniformly at random
    topic_of = np.concatenate([np.arange(t), rng.integers(0, t, size=p - t)])[rng.permutation(p)]
    by_topic = np.lexsort((np.arange(p), topic_of))
    cum = np.cumsum(weight[by_topic])
    topic_w = np.bincount(topic_of, weights=weight, minlength=t)
    topic_lo = np.concatenate([[0.0], np.cumsum(topic_w)[:-1]])
    class_tokens = rng.integers(0, f, size=(p, s.tokens_per_class))
    topic_tokens = rng.integers(0, f, size=(t, s.tokens_per_topic))
    background = np.empty(f)
    background[rng.permutation(f)] = 1.0 / (np.arange(f) + 1.0)
    return _Structure(
        weight,
        by_topic,
        cum,
        topic_lo,
        topic_w,
        class_tokens,
        topic_tokens,
        topic_of,
        np.cumsum(background) / background.sum(),
    )


def _draw(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Indices into ``cum`` (a cumulative distribution) for uniforms ``u`` scaled to its total."""
    return np.minimum(np.searchsorted(cum, u, side="right"), cum.size - 1)


def _chunk(s: XCSpec, st: _Structure, index: int, n: int) -> XCData:
    rng = numpy_rng(s.seed, "xc-chunk", index)
    p, f = s.num_classes, s.num_features
    topic = _draw(np.cumsum(st.topic_w), rng.random(n) * st.topic_w.sum())
    draws = np.minimum(1 + rng.poisson(s.labels_per_sample - 1.0, size=n), p)
    row = np.repeat(np.arange(n), draws)
    t = topic[row]
    # within the sample's topic, in proportion to the class weights; a label_noise share from all classes
    u = st.topic_lo[t] + rng.random(row.size) * st.topic_w[t]
    lab = st.by_topic[_draw(st.cum, u)]
    noisy = rng.random(row.size) < s.label_noise
    lab[noisy] = st.by_topic[_draw(st.cum, rng.random(int(noisy.sum())) * st.cum[-1])]
    labels = sp.csr_matrix((np.ones(row.size, np.float32), (row, lab)), shape=(n, p))
    labels.sum_duplicates()  # a label drawn twice counts once
    labels.data[:] = 1.0
    # feature tokens: from the labels' signatures, the topic, and the background
    k = s.features_per_sample
    k_lab, k_top = round(k * s.label_token_share), round(k * s.topic_token_share)
    k_bg = k - k_lab - k_top
    lab_ptr, lab_ids = labels.indptr, labels.indices
    nlab = np.diff(lab_ptr)
    parts_row, parts_tok = [], []
    has = np.flatnonzero(nlab > 0)
    r = np.repeat(has, k_lab)
    pick = lab_ids[lab_ptr[r] + (rng.random(r.size) * nlab[r]).astype(np.int64)]
    parts_row.append(r)
    parts_tok.append(st.class_tokens[pick, rng.integers(0, s.tokens_per_class, size=r.size)])
    r = np.repeat(np.arange(n), k_top)
    parts_row.append(r)
    parts_tok.append(st.topic_tokens[topic[r], rng.integers(0, s.tokens_per_topic, size=r.size)])
    r = np.repeat(np.arange(n), k_bg + k_lab * (nlab == 0))  # a sample without labels draws background instead
    parts_row.append(r)
    parts_tok.append(_draw(st.background_cum, rng.random(r.size)))
    rows, toks = np.concatenate(parts_row), np.concatenate(parts_tok)
    x = sp.csr_matrix((np.ones(rows.size), (rows, toks)), shape=(n, f))
    x.sum_duplicates()
    x.data = np.log1p(x.data)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x.data /= np.repeat(np.where(norms > 0, norms, 1.0), np.diff(x.indptr))
    return XCData(sp.csr_matrix(x, dtype=np.float32), labels)


def iter_synthetic_xc(spec: XCSpec) -> Iterator[XCData]:
    """The samples of :func:`synthetic_xc` in chunks of :data:`CHUNK` (the last one shorter)."""
    spec.validate()
    st = _structure(spec)
    for index, lo in enumerate(range(0, spec.num_samples, CHUNK)):
        yield _chunk(spec, st, index, min(CHUNK, spec.num_samples - lo))


def synthetic_xc(spec: XCSpec | None = None, **kw) -> XCData:
    """Draw a synthetic extreme-classification dataset.

    Args:
        spec: an :class:`XCSpec`; or its fields as keywords (``synthetic_xc(num_classes=312330)``).

    Returns:
        :class:`~fedkernels.data.XCData`: float32 CSR features ``[N, F]`` (about ``features_per_sample``
        nonzeros per row, unit L2 norm) and 0/1 CSR labels ``[N, p]`` (sorted ids per row).

    Raises:
        ValueError: a bad field (named), or both ``spec`` and keywords.

    Example:
        >>> d = synthetic_xc(num_samples=2000, num_classes=131073, num_features=2**15, seed=1)
        >>> d.features.shape, d.labels.shape, d.features.nnz / 2000    # ~200 nonzeros per sample
    """
    if spec is not None and kw:
        raise ValueError("pass either spec or keyword fields, not both")
    spec = spec if spec is not None else XCSpec(**kw)
    chunks = list(iter_synthetic_xc(spec))
    if not chunks:
        return XCData(
            sp.csr_matrix((0, spec.num_features), dtype=np.float32),
            sp.csr_matrix((0, spec.num_classes), dtype=np.float32),
        )
    return XCData(
        sp.csr_matrix(sp.vstack([c.features for c in chunks], format="csr"), dtype=np.float32),
        sp.csr_matrix(sp.vstack([c.labels for c in chunks], format="csr"), dtype=np.float32),
    )


def class_weights(spec: XCSpec) -> np.ndarray:
    """The generator's class weights ``w_c`` (float64 ``[p]``, sum 1): the expected label frequencies' shape."""
    spec.validate()
    return _structure(spec).weight


def class_topics(spec: XCSpec) -> np.ndarray:
    """Each class's latent topic (int64 ``[p]``)."""
    spec.validate()
    return _structure(spec).topic_of
