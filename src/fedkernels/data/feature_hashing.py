"""Signed feature hashing of sparse features to a dense ``[N, D]`` matrix, as FedMLH does.

Feature ``f`` goes to bucket ``h(f)`` with sign ``s(f)`` of ``fedkernels.HashFamily(1, D, seed)``,
so every client hashes the same way from three broadcast integers.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from ..hashing import HashFamily


def idf_weights(features: sp.csr_matrix) -> np.ndarray:
    """Smoothed inverse document frequency per feature: ``log((1 + N) / (1 + df_f)) + 1``.

    Args:
        features: CSR ``[N, F]`` (fit on the training set, applied to train and test).

    Returns:
        float64 ``[F]``.
    """
    n = features.shape[0]
    df = np.bincount(features.indices, minlength=features.shape[1])
    return np.log((1.0 + n) / (1.0 + df)) + 1.0


def hash_features(
    features: sp.csr_matrix,
    dim: int,
    seed: int = 0,
    idf: np.ndarray | None = None,
    l2_normalize: bool = False,
    sparse: bool = False,
) -> torch.Tensor:
    """Hash sparse features to ``dim`` signed buckets: ``out[n, h(f)] += s(f) * w_f * x[n, f]``.

    Args:
        features: CSR ``[N, F]``.
        dim: D, the number of buckets (>= 1).
        seed: the hash family's seed.
        idf: optional per-feature weights ``w`` ``[F]`` (e.g. :func:`idf_weights` for tf-idf).
        l2_normalize: scale each output row to unit L2 norm (all-zero rows stay zero).
        sparse: return a ``torch.sparse_csr`` tensor (never materialising ``[N, D]``) instead of a dense one.

    Returns:
        float32 ``[N, D]``, dense or sparse CSR.

    Example:
        >>> x = hash_features(read_xc("bibtex/train.txt").features, 512, seed=1, l2_normalize=True)
    """
    if int(dim) < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    features = sp.csr_matrix(features)
    num_features = features.shape[1]
    if idf is not None:
        idf = np.asarray(idf, dtype=np.float64)
        if idf.shape != (num_features,):
            raise ValueError(f"idf must have shape [{num_features}], got {list(idf.shape)}")
    # Only the features that occur are hashed: a header may declare far more columns than the rows use.
    # Renumbering them in increasing order keeps each row's entries in their order, so the sparse product
    # below adds the same terms in the same order as over all F columns.
    used, column = np.unique(features.indices, return_inverse=True)
    hf = HashFamily(1, int(dim), int(seed))
    ids = torch.from_numpy(used.astype(np.int64))
    bucket = hf.buckets(ids)[:, 0].numpy().astype(np.int64)
    sign = hf.sign(ids)[:, 0].numpy().astype(np.float64)
    if idf is not None:
        sign = sign * idf[used]
    compact = sp.csr_matrix(
        (features.data.astype(np.float64), column.reshape(-1), features.indptr), shape=(features.shape[0], len(used))
    )
    # A [U, D] matrix with one signed entry per row: the hashing is one sparse product.
    proj = sp.csr_matrix((sign, bucket, np.arange(len(used) + 1)), shape=(len(used), int(dim)))
    hashed = sp.csr_matrix(compact @ proj)
    if sparse:
        from ..sparse_rows import csr_from_scipy

        hashed.eliminate_zeros()  # colliding features of opposite sign may cancel
        return csr_from_scipy(l2_normalize_csr(hashed) if l2_normalize else hashed)
    dense = np.asarray(hashed.todense())
    return torch.from_numpy((l2_normalize_rows(dense) if l2_normalize else dense).astype(np.float32))


def l2_normalize_csr(x: sp.csr_matrix) -> sp.csr_matrix:
    """Each row of the sparse ``x [N, D]`` scaled to unit L2 norm (a copy); all-zero rows stay zero."""
    x = sp.csr_matrix(x, dtype=np.float64, copy=True)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    x.data *= np.repeat(scale, np.diff(x.indptr))
    return x


def l2_normalize_rows(x: np.ndarray) -> np.ndarray:
    """Each row of ``x [N, D]`` scaled to unit L2 norm; all-zero rows stay zero."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
