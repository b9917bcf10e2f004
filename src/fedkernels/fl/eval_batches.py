"""How :meth:`fedkernels.fl.Server.evaluate` cuts a test set into batches, so that its memory stays
bounded whatever an LF-* filter file says.

A row whose filter lists f labels needs ``k + f`` predictions to keep k after filtering. Sizing every
batch by the longest filter row of the whole test set let one row listing every label make every row
predict all p classes (about 20 GiB at p = 312,330). Here each batch is sized by its own rows' filters,
and a wide batch holds fewer rows: ``rows x width <= EVAL_ELEMENTS`` (or one row, whatever its width),
so a hostile filter row costs memory for its own few rows only, and time in proportion to its length.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

EVAL_ELEMENTS = 1 << 20
"""The most predicted ids one evaluation batch holds (``rows x width``) when a filter widens it: each
costs about 50 bytes through the top-k and the filter (values, ids, sort order, gathers), so the bound
is about 50 MiB."""


def eval_batches(
    num_rows: int, batch: int, k: int, num_classes: int, filtered: torch.Tensor | None = None
) -> Iterator[tuple[int, int, int]]:
    """``(start, stop, width)`` of each batch of test rows, in order, covering ``[0, num_rows)``.

    Args:
        num_rows: N, the test rows.
        batch: the most rows a batch may hold (>= 1).
        k: predictions kept per row after filtering.
        num_classes: p; no row predicts more.
        filtered: int64 ``[N]``, how many labels each row's filter lists (``None``: no filter).

    Yields:
        ``width = min(k + max(filtered[start:stop]), p)``, with ``stop - start <= batch`` and
        ``(stop - start) * width <= max(EVAL_ELEMENTS, batch * k, width)``: no more than an unfiltered
        batch or the bound, or one row.
    """
    batch = max(1, int(batch))
    budget = max(EVAL_ELEMENTS, batch * k)
    start = 0
    while start < num_rows:
        stop = min(num_rows, start + batch)
        width = min(k + _most(filtered, start, stop), num_classes)
        if (stop - start) * width > budget:
            # fewer rows; their widest filter can only be narrower, so the product stays under the bound
            stop = start + max(1, budget // width)
            width = min(k + _most(filtered, start, stop), num_classes)
        yield start, stop, width
        start = stop


def _most(filtered: torch.Tensor | None, start: int, stop: int) -> int:
    return int(filtered[start:stop].max()) if filtered is not None and stop > start else 0
