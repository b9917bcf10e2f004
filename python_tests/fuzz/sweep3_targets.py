"""The third hostile sweep's fuzz targets (see :mod:`python_tests.fuzz.targets` for the contract: return
when the input is accepted and right, raise ``ValueError`` when it is refused):

- ``filter``: an LF-* filter file through :func:`fedkernels.data.read_filter` (4 rows, 6 labels). Accepted:
  CSR with sorted unique ids in range; the evaluation's batches over it stay within their bound and the
  filtered predictions equal the per-row reference.
- ``sparse_text``: an LF-* ``*_X_Xf.txt`` / ``*_X_Y.txt`` file through :func:`fedkernels.data.read_sparse_text`.
  Accepted: finite float32, every column inside the header's C, and it reads back the same when written.
- ``metrics``: predictions and a label CSR (hostile ids) as a small text document through
  :func:`fedkernels.metrics.ranking_metrics` and ``filter_predictions``. Accepted: every value equals the
  per-sample reference of the published formulas.
- ``propensity``: ``A B`` as ``--propensity`` takes them, through the run's field check. Accepted: the
  inverse propensities are finite, at least 1 and at most ``MAX_INV_PROPENSITY`` at any training-set
  size, and PSP@k equals the reference.
- ``model_shape``: a TOML run config of model settings (widths, R and B, embedding sizes, synthetic
  sizes, batch size) through ``fedkernels run``'s checks. Accepted: every algorithm's model fits the
  machine by :mod:`fedkernels.experiments.model_memory`'s lower bound.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from fedkernels.data import read_filter, read_sparse_text
from fedkernels.fl.eval_batches import EVAL_ELEMENTS, eval_batches
from fedkernels.metrics import MAX_INV_PROPENSITY, filter_predictions, inverse_propensity, psp_at_k, ranking_metrics
from python_tests.reference import metrics_ref

FILTER_ROWS, FILTER_LABELS = 4, 6
INT64 = (-(2**63), 2**63 - 1)


def _temp(data: bytes, suffix: str):
    from python_tests.fuzz.targets import _temp_file

    return _temp_file(data, suffix)


def _lists(indptr: np.ndarray | torch.Tensor, indices: np.ndarray | torch.Tensor) -> list[list[int]]:
    ptr, idx = [int(v) for v in indptr], [int(v) for v in indices]
    return [idx[ptr[i] : ptr[i + 1]] for i in range(len(ptr) - 1)]


# ---- filter files ------------------------------------------------------------------------------


def check_filter(data: bytes) -> None:
    with _temp(data, ".txt") as path:
        fp, fi = read_filter(path, FILTER_ROWS, FILTER_LABELS)
    assert fp.dtype == np.int64 and fi.dtype == np.int64 and fp.shape == (FILTER_ROWS + 1,)
    assert fp[0] == 0 and fp[-1] == fi.size and (np.diff(fp) >= 0).all()
    rows = _lists(fp, fi)
    assert all(r == sorted(set(r)) and all(0 <= c < FILTER_LABELS for c in r) for r in rows)
    counts = torch.from_numpy(np.diff(fp))
    for start, stop, width in eval_batches(FILTER_ROWS, 2, 3, FILTER_LABELS, counts):
        assert (stop - start) * width <= max(EVAL_ELEMENTS, 2 * 3, width)
    ranking = torch.tensor([[(c + i) % FILTER_LABELS for c in range(FILTER_LABELS)] for i in range(FILTER_ROWS)])
    got = filter_predictions(ranking, torch.from_numpy(fp), torch.from_numpy(fi), 3)
    assert got.tolist() == metrics_ref.filter_predictions(ranking.tolist(), [set(r) for r in rows], 3)


# ---- LF-* sparse text ----------------------------------------------------------------------------


def check_sparse_text(data: bytes) -> None:
    with _temp(data, ".txt") as path:
        m = read_sparse_text(path)
    assert m.dtype == np.float32 and np.isfinite(m.data).all() and m.shape[1] <= 2**26
    assert m.indptr[0] == 0 and m.indptr[-1] == m.indices.size and (np.diff(m.indptr) >= 0).all()
    assert m.indices.size == 0 or (m.indices.min() >= 0 and m.indices.max() < m.shape[1])
    lines = [f"{m.shape[0]} {m.shape[1]}"]
    for i in range(m.shape[0]):
        lo, hi = m.indptr[i], m.indptr[i + 1]
        lines.append(" ".join(f"{int(c)}:{float(v):.9g}" for c, v in zip(m.indices[lo:hi], m.data[lo:hi], strict=True)))
    with _temp(("\n".join(lines) + "\n").encode(), ".txt") as path:
        again = read_sparse_text(path)
    assert again.shape == m.shape and (again != m).nnz == 0


# ---- metrics inputs ------------------------------------------------------------------------------


def _ints(tokens: list[str]) -> list[int]:
    out = [int(t) for t in tokens]  # ValueError: not a test document
    if any(not INT64[0] <= v <= INT64[1] for v in out):
        raise ValueError("not a test document (an id a tensor cannot hold)")
    return out


def parse_metrics_doc(data: bytes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``topk a b ; c d`` (rows split by ``;``), ``indptr ...``, ``indices ...`` and optionally ``w ...``
    (inverse propensities), one per line. Anything else is a ValueError (not a test document)."""
    fields: dict[str, str] = {}
    for line in data.decode("utf-8").splitlines():
        if line.strip():
            key, _, rest = line.strip().partition(" ")
            fields[key] = rest
    if not {"topk", "indptr", "indices"} <= set(fields) or set(fields) - {"topk", "indptr", "indices", "w"}:
        raise ValueError("not a test document (fields)")
    rows = [_ints(r.split()) for r in fields["topk"].split(";")] if fields["topk"].strip() else []
    if len({len(r) for r in rows}) > 1:
        raise ValueError("not a test document (ragged topk)")
    topk = torch.tensor(rows, dtype=torch.int64).reshape(len(rows), len(rows[0]) if rows else 0)
    indptr = torch.tensor(_ints(fields["indptr"].split()), dtype=torch.int64)
    indices = torch.tensor(_ints(fields["indices"].split()), dtype=torch.int64)
    w = None
    if "w" in fields:
        w = torch.tensor([float(t) for t in fields["w"].split()], dtype=torch.float64)
    return topk, indptr, indices, w


def check_metrics(data: bytes) -> None:
    topk, indptr, indices, w = parse_metrics_doc(data)
    got = ranking_metrics(topk, indptr, indices, (1, 2), inv_propensity=w)
    preds, labels = topk.tolist(), [set(r) for r in _lists(indptr, indices)]
    n, width = topk.shape
    for k in (1, 2):
        if k > width:
            continue
        want = metrics_ref.precision_at_k(preds, labels, k) if n else 0.0
        assert math.isclose(got[f"P@{k}"], want, rel_tol=1e-6, abs_tol=1e-12), (k, got, want)  # a float32 mean
        want = metrics_ref.ndcg_at_k(preds, labels, k) if n else 0.0
        assert math.isclose(got[f"nDCG@{k}"], want, abs_tol=1e-12), (k, got, want)
        if w is not None and n:
            want = metrics_ref.psp_at_k(preds, labels, w.tolist(), k, True)
            assert math.isclose(got[f"PSP@{k}"], want, rel_tol=1e-9, abs_tol=1e-12), (k, got, want)
            assert 0.0 <= got[f"PSnDCG@{k}"] <= 1.0 + 1e-9
    kept = filter_predictions(topk, indptr, indices, min(1, width))
    assert kept.tolist() == metrics_ref.filter_predictions(preds, labels, min(1, width))


# ---- propensity arguments ------------------------------------------------------------------------


def check_propensity(data: bytes) -> None:
    from fedkernels.experiments.limits import field_checks

    tokens = data.decode("utf-8").split()
    if len(tokens) != 2:
        raise ValueError("not a test document (two numbers)")
    a, b = float(tokens[0]), float(tokens[1])  # as argparse's type=float reads --propensity A B
    field_checks()["propensity"]([a, b])
    for n in (3, 10**6, 2**62):
        inv = inverse_propensity(torch.tensor([0.0, 1.0, 3.0, 1e9]), n, a, b)
        assert bool(torch.isfinite(inv).all()) and float(inv.min()) >= 1.0 and float(inv.max()) <= MAX_INV_PROPENSITY
    inv = inverse_propensity(torch.tensor([5.0, 0.0, 2.0, 1.0]), 100, a, b)
    topk, labels = [[1, 0], [2, 3]], [[0, 1], [3]]
    ptr = torch.tensor([0, 2, 3])
    got = psp_at_k(torch.tensor(topk), ptr, torch.tensor([0, 1, 3]), inv, 2)
    want = metrics_ref.psp_at_k(topk, [set(r) for r in labels], inv.tolist(), 2, True)
    assert math.isfinite(got) and math.isclose(got, want, rel_tol=1e-9)


# ---- model shapes --------------------------------------------------------------------------------


def check_model_shape(data: bytes) -> None:
    from fedkernels._memory import available_memory
    from fedkernels.experiments.model_memory import bytes_needed, config_shape, footprint
    from fedkernels_cli import parser
    from fedkernels_cli.config import configure

    text = data.decode("utf-8")
    if "client_secret_file" in text or "dataset" in text:
        raise ValueError("not a test document (a secret file would be made, or a dataset read)")
    with _temp(text.encode(), ".toml") as path:
        run = configure(parser().parse_args(["run", "--config", str(Path(path))]))
    cfg, built = run.config, run.strategies
    shape = config_shape(cfg)
    assert shape is not None  # synthetic: always declared
    for s in built.values():
        fp = footprint(s, shape)
        assert fp is not None, s.name
        assert bytes_needed(fp, shape, cfg.batch_size, cfg.optimizer) <= available_memory(), s.name
