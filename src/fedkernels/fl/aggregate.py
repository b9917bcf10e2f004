"""Server-side aggregation on the compiled ops (docs/design.md §4: the server's reductions are kernels too).

``weighted_average`` is the FedAvg reduction of whole states, one ``masked_weighted_average`` call
over every tensor of every client (each client "sends" all of them); ``weighted_rows_mean`` is the
row-wise mean of sparse row uploads through ``scatter_rows_mean``; ``weighted_rows_update`` moves each
row by its senders' updates over the round's total weight (the FedSS paper's Algorithm 1), from the
same mean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ..ops.sampled import scatter_rows_mean
from ..ops.select import masked_weighted_average


def weighted_average(states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float]) -> dict[str, torch.Tensor]:
    """``sum_k w_k s_k / sum_k w_k`` per tensor name, in one pass of the compiled kernel.

    Accumulation runs in client order, in float32 for float32/16-bit tensors (float64 for float64),
    so the result is deterministic; the output keeps each tensor's dtype.

    Args:
        states: K dicts with the same names; tensor ``name`` has one shape, floating dtype and
            device across clients.
        weights: K non-negative finite weights (e.g. sample counts) with a positive sum; a client
            of weight 0 contributes nothing.

    Returns:
        A new dict ``{name: [shape of name]}`` in the order of ``states[0]``.

    Raises:
        ValueError: no states, a length mismatch, weights that are negative, non-finite or sum to
            zero, differing names, or a non-floating tensor.

    Example:
        >>> weighted_average([{"w": torch.ones(2)}, {"w": torch.zeros(2)}], [1.0, 3.0])   # {'w': [0.25, 0.25]}
    """
    if len(states) == 0:
        raise ValueError("states must hold at least one client's state")
    if len(weights) != len(states):
        raise ValueError(f"weights has {len(weights)} entries but there are {len(states)} states")
    w = [float(x) for x in weights]
    if any(not (x >= 0.0 and x < float("inf")) for x in w):
        raise ValueError(f"weights must be finite and >= 0, got {w}")
    if sum(w) <= 0:
        raise ValueError("weights must have a positive sum")
    names = list(states[0])
    for k, s in enumerate(states):
        if list(s) != names and set(s) != set(names):
            raise ValueError(f"states[{k}] has names {sorted(s)}, states[0] has {sorted(names)}")
    for name in names:
        if not states[0][name].is_floating_point():
            raise ValueError(f"states[0][{name!r}] must be a floating-point tensor, got {states[0][name].dtype}")
    dst = [torch.empty_like(states[0][n], memory_format=torch.contiguous_format) for n in names]
    idx = torch.arange(len(names), dtype=torch.int64, device="cpu")  # host metadata, whatever the tensors' device
    # Clients of weight 0 are left out: they add nothing, and the kernel then never reads them.
    sent = [(idx, [s[n].detach() for n in names], wk) for s, wk in zip(states, w, strict=True) if wk > 0]
    masked_weighted_average(dst, sent)
    return dict(zip(names, dst, strict=True))


def weighted_rows_mean(
    table: torch.Tensor, ids: Sequence[torch.Tensor], rows: Sequence[torch.Tensor], weights: Sequence[float]
) -> torch.Tensor:
    """A copy of ``table`` whose rows named by the clients are their weighted means (``scatter_rows_mean``).

    Args:
        table: ``[n, d]`` the current rows.
        ids: per client, int64 ``[t_k]`` row ids it sent (distinct or not).
        rows: per client, ``[t_k, d]`` the rows.
        weights: per client, a weight ``>= 0``; clients of weight 0 move no row.

    Returns:
        ``[n, d]``: row r is ``sum w_k rows_k[r] / sum w_k`` over the clients with weight > 0 that
        sent r; other rows as in ``table``.
    """
    if not (len(ids) == len(rows) == len(weights)):
        raise ValueError(
            f"ids, rows and weights must have one entry per client, got {len(ids)}, {len(rows)}, {len(weights)}"
        )
    keep = [k for k, wk in enumerate(weights) if float(wk) > 0]
    out = table.clone()
    if not keep:
        return out
    idx = torch.cat([ids[k].reshape(-1) for k in keep])
    src = torch.cat([rows[k] for k in keep])
    w = torch.cat(
        [torch.full((ids[k].numel(),), float(weights[k]), dtype=torch.float32, device=table.device) for k in keep]
    )
    return scatter_rows_mean(out, idx, src, w)


def weighted_rows_update(
    table: torch.Tensor, ids: Sequence[torch.Tensor], rows: Sequence[torch.Tensor], weights: Sequence[float]
) -> torch.Tensor:
    """A copy of ``table`` moved by the clients' row updates over the round's total weight (the FedSS
    paper's Algorithm 1, line 12: each client's zero-padded update scaled by ``w_k / sum_j w_j``).

    Row r moves by ``sum_{k sent r} w_k (rows_k[r] - table[r]) / W``, ``W = sum_k w_k`` over every
    client, whether it sent r or not; so a row few clients sent moves by their share of the round,
    where :func:`weighted_rows_mean` moves it all the way to their mean. Built on the same
    ``scatter_rows_mean``: the update is ``(m_r / W) (mean_r - table[r])`` with ``m_r`` the weight of
    r's senders (summed in float64, client order) and ``mean_r`` :func:`weighted_rows_mean`'s row.

    Args:
        table: ``[n, d]`` the current rows.
        ids: per client, int64 ``[t_k]`` row ids it sent (a repeated id counts once per time sent).
        rows: per client, ``[t_k, d]`` the rows.
        weights: per client, a weight ``>= 0``; clients of weight 0 move no row.

    Returns:
        ``[n, d]`` in ``table``'s dtype; rows nobody sent equal ``table``'s.

    Raises:
        ValueError: the three lists differ in length, or a weight is negative or not finite.

    Example:
        >>> t = torch.zeros(3, 1)
        >>> weighted_rows_update(t, [torch.tensor([0]), torch.tensor([1])], [torch.ones(1, 1)] * 2, [1.0, 3.0])
        tensor([[0.2500], [0.7500], [0.0000]])
    """
    if not (len(ids) == len(rows) == len(weights)):
        raise ValueError(
            f"ids, rows and weights must have one entry per client, got {len(ids)}, {len(rows)}, {len(weights)}"
        )
    w = [float(x) for x in weights]
    if any(not (x >= 0.0 and x < float("inf")) for x in w):
        raise ValueError(f"weights must be finite and >= 0, got {w}")
    total = sum(w)
    mean = weighted_rows_mean(table, ids, rows, w)
    if total <= 0:
        return mean
    # the senders' weight per row, client by client in float64: each client's ids made distinct (with
    # their counts), so no step adds twice into one row and no atomics decide the order
    share = torch.zeros(table.shape[0], dtype=torch.float64, device=table.device)
    for k, wk in enumerate(w):
        if wk > 0 and ids[k].numel():
            u, count = torch.unique(ids[k].reshape(-1).to(device=table.device, dtype=torch.int64), return_counts=True)
            share[u] += wk * count.double()
    share /= total
    sent = share > 0
    old = table[sent].double()
    out = table.clone()
    out[sent] = (old + share[sent, None] * (mean[sent].double() - old)).to(table.dtype)
    return out
