"""Every algorithm's round as sums: what a client contributes and how the server reads the sums.

Secure aggregation and client-level DP both need a round to be ``new state = f(state, sum_k x_k)``
with each client's ``x_k`` of a shape fixed before anyone trains (so the sum hides who sent what and
one client's influence is the norm of its ``x_k``). The strategies themselves are unchanged: a form
wraps one, builds the client's ordinary download, runs its ordinary ``client_update`` and turns the
upload into ``x_k``.

- :class:`DenseForm` (FedAvg, FedMLH): ``x_k = a_k (theta_k - theta)`` plus the weight ``a_k``; the
  server adds ``sum x / sum a``, FedAvg's weighted average written as a step.
- :class:`L1DiffForm` (l1-difference): ``a_k d_k``, the decoded direction; the server steps by
  ``-server_lr * eta * sum / sum a``. The run-length compression cannot survive masking (a masked
  vector is uniform, so incompressible): the upload is the dense direction in the ring. With
  ``segments_every = K >= 2`` the compression that can survive is kept (:mod:`.segments`): every
  K-th round is dense and the K - 1 between send one value per public segment.
- :class:`PartialForm` (partial exchange): every client masks all M tensors, zeros for the ones it did
  not pick, plus an M-vector of weights; the server learns per-tensor sums and counts only, not who
  sent which tensor. The upload is the whole model (the partial saving is lost under masking).
- :class:`RowsForm` (FedSS family, FedAwS/FedALC): the body as DenseForm, and the class rows over a
  row set ``U`` that is the same for every client of the round: under secure aggregation the union of
  the round's requests, itself summed securely as a 0/1 vector over the p rows (the server learns
  how many clients asked for each row, not who); under DP every row (so the released model is
  covered by epsilon). Each client's download is the body and ``W[U]``, its ordinary payload is cut
  out of it on the client, and it contributes ``a_k (w_new - w_old)`` at its rows, zeros elsewhere,
  plus per-row weights.

With DP the weights are 1 and the server divides by a fixed denominator instead (the expected
number of clients, McMahan et al. 2018), so no per-client weight or count enters the sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..algorithms.l1diff import GAMMA, GAMMA_SENT, L1Diff
from ..algorithms.l1diff_codec import decode_upload
from ..payload import Payload
from ..strategy import SERVER, State, Strategy
from .segments import (
    boundary_mask,
    decode_segments,
    encode_segments,
    expand,
    lengths_of,
    segment_means,
    segmentation,
)

WEIGHT, COUNT, ROWS, ROW_COUNT = "__weight", "__count", "__rows", "__row_count"
ROUND_ROWS = "__round_rows"  # int64 [|U|]: the row ids of the round, in the download of a RowsForm
SEGMENTS = SERVER + "segments."  # + tensor name, uint8 [numel]: L1DiffForm's public segments (1: a segment starts)
SEGMENTS_LEFT = SERVER + "segments_left"  # int64 []: the segmented rounds left before the next dense one
SEGMENTS_SENT = "l1.segments."  # + tensor name, uint8: the segments (codec bytes) in a segmented round's download


class DenseForm:
    """Whole-model averaging (FedAvg, FedMLH and any strategy whose upload is its trained state)."""

    has_rows = False

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy

    def names(self, state: State) -> list[str]:
        """The state tensors that are averaged (floating point, not server-only), sorted: a decoded
        download's order need not be the state's, and per-tensor vectors are indexed by this order."""
        return sorted(n for n, t in state.items() if t.is_floating_point() and not n.startswith(SERVER))

    def layout(self, state: State, weighted: bool, rows: torch.Tensor | None = None) -> dict[str, tuple[int, ...]]:
        """Name -> shape of every summed tensor (public: the same for every client)."""
        out = {n: tuple(state[n].shape) for n in self.names(state)}
        if weighted:
            out[WEIGHT] = (1,)
        return out

    def download(self, state: State, client_id: int, round: int, seed: int, rows: torch.Tensor | None) -> Payload:
        """The client's download: the strategy's own, without server-side entries (the private round's
        own, such as DP-FTRL's tree seed, never leave the server whatever the strategy sends)."""
        payload = self.strategy.client_payload(state, client_id, None, round, seed)
        return {n: t for n, t in payload.items() if not n.startswith(SERVER)}

    def local_payload(self, download: Payload, request: Payload | None) -> Payload:
        """Client side: the strategy's ordinary download, out of the round's (here the same)."""
        return download

    def initial_entries(self, state: State) -> dict[str, torch.Tensor]:
        """Server-side state entries this form keeps (fixed shapes, so a checkpoint can hold them)."""
        return {}

    def check_dp(self) -> None:
        """Raise ValueError if this form's round cannot run under client-level DP (default: it can)."""

    def with_initial_entries(self, state: State) -> State:
        """``state`` with :meth:`initial_entries` added where it lacks them (a resumed state keeps its own)."""
        return {**self.initial_entries(state), **state}

    def contribution(
        self, download: Payload, upload: Payload, weight: float | None, request: Payload | None = None
    ) -> dict[str, torch.Tensor]:
        """``x_k``: the weighted change of every averaged tensor (``weight`` None: unweighted, no weight entry)."""
        a = 1.0 if weight is None else weight
        out = {n: a * (upload[n].double() - download[n].double()) for n in self.names(download)}
        if weight is not None:
            out[WEIGHT] = torch.tensor([a], dtype=torch.float64)
        return out

    def finish(self, state: State, sums: dict[str, torch.Tensor], denominator: float | None) -> State:
        """The new state from the sums (``denominator`` None: the summed weight)."""
        den = float(sums[WEIGHT][0]) if denominator is None else denominator
        new = dict(state)
        if den <= 0:
            return new
        for n in self.names(state):
            new[n] = (state[n].double() + sums[n] / den).to(state[n].dtype)
        return new


class L1DiffForm(DenseForm):
    """The l1-difference update: the decoded directions are summed; the server takes the mean step.

    Args:
        strategy: an :class:`~fedkernels.fl.algorithms.L1Diff`.
        segments_every: 0 or 1: every round is dense (each client's own direction, ``numel`` values a
            tensor). K >= 2: the public-segmentation variant (:mod:`.segments`): clients send exact
            gradients (the download's gamma is 0); a dense round (the first, then every K-th) steps by
            ``prox_tv1d(mean gradient, gamma)`` and makes that step's runs the public segments of the
            next K - 1 rounds, in which each client sends one gradient mean per segment and the server
            steps by the summed means. Only the server reads this; a client follows its download.

    ``gamma_rel``: round 0 (gamma 0, exact gradients) sets ``gamma = gamma_rel * mean |mean step|`` from
    the summed step, as the plain strategy does from the clients' directions.
    """

    def __init__(self, strategy: Strategy, segments_every: int = 0) -> None:
        super().__init__(strategy)
        if isinstance(segments_every, bool) or not isinstance(segments_every, int) or segments_every < 0:
            raise ValueError(f"segments_every must be an integer >= 0, got {segments_every!r}")
        self.segments_every = segments_every
        # tensor name -> (the state's boundary mask, its wire form): encoded once per segmentation, not
        # once per client (the mask tensor is replaced, never changed in place, when the segments change)
        self._wire: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def check_dp(self) -> None:
        """``gamma_rel`` is refused: it sets gamma from round 0's mean step, which DP noise inflates."""
        s = self.strategy
        assert isinstance(s, L1Diff)
        if s.gamma_rel is not None:
            raise ValueError(
                "L1Diff's gamma_rel sets gamma from round 0's mean |step|, which DP noise inflates (by about "
                "sigma * clip / clients per coordinate); give gamma instead"
            )

    def names(self, state: State) -> list[str]:
        """The model's tensors: the download's gamma (``l1.gamma``) and segments are no model tensors."""
        return [n for n in super().names(state) if n != GAMMA_SENT and not n.startswith(SEGMENTS_SENT)]

    def initial_entries(self, state: State) -> dict[str, torch.Tensor]:
        """The segmented variant's entries: no segmentation yet (the first round is dense)."""
        if self.segments_every < 2:
            return {}
        out = {SEGMENTS + n: torch.zeros(state[n].numel(), dtype=torch.uint8) for n in self.names(state)}
        out[SEGMENTS_LEFT] = torch.tensor(0, dtype=torch.int64)
        return out

    @staticmethod
    def segmented(state: State) -> bool:
        """Whether this round sends segment means (a public segmentation with rounds left)."""
        return SEGMENTS_LEFT in state and int(state[SEGMENTS_LEFT]) > 0

    def layout(self, state: State, weighted: bool, rows: torch.Tensor | None = None) -> dict[str, tuple[int, ...]]:
        if not self.segmented(state):
            return super().layout(state, weighted, rows)
        out: dict[str, tuple[int, ...]] = {n: (int(state[SEGMENTS + n].sum()),) for n in self.names(state)}
        if weighted:
            out[WEIGHT] = (1,)
        return out

    def download(self, state: State, client_id: int, round: int, seed: int, rows: torch.Tensor | None) -> Payload:
        """The strategy's download; in the segmented variant with gamma 0 and, in a segmented round,
        every tensor's segments (``l1.segments.<name>``, :func:`~.segments.encode_segments`)."""
        out = dict(super().download(state, client_id, round, seed, rows))
        if self.segments_every >= 2:
            out[GAMMA_SENT] = torch.zeros(1, dtype=torch.float64)
            if self.segmented(state):
                for n in self.names(state):
                    out[SEGMENTS_SENT + n] = self._segments_wire(state[SEGMENTS + n], n)
        return out

    def _segments_wire(self, mask: torch.Tensor, name: str) -> torch.Tensor:
        """:func:`~.segments.encode_segments` of ``mask``'s segments, cached while the mask is the same tensor."""
        hit = self._wire.get(name)
        if hit is None or hit[0] is not mask:
            hit = self._wire[name] = (mask, encode_segments(lengths_of(mask)))
        return hit[1]

    def local_payload(self, download: Payload, request: Payload | None) -> Payload:
        """The strategy's own download: the segment lengths taken out."""
        return {n: t for n, t in download.items() if not n.startswith(SEGMENTS_SENT)}

    def contribution(
        self, download: Payload, upload: Payload, weight: float | None, request: Payload | None = None
    ) -> dict[str, torch.Tensor]:
        """``a_k d_k`` per tensor, or in a segmented round ``a_k`` times its segment means."""
        a = 1.0 if weight is None else weight
        shapes = {n: download[n].shape for n in self.names(download)}
        assert isinstance(self.strategy, L1Diff)
        dirs = decode_upload(upload, shapes, self.strategy.value_dtype)
        out = {}
        for n, shape in shapes.items():
            x = a * dirs[n].double()
            if SEGMENTS_SENT + n in download:
                lengths = decode_segments(download[SEGMENTS_SENT + n], math.prod(shape), n)
                x = segment_means(x.reshape(-1), lengths)
            out[n] = x
        if weight is not None:
            out[WEIGHT] = torch.tensor([a], dtype=torch.float64)
        return out

    def finish(self, state: State, sums: dict[str, torch.Tensor], denominator: float | None) -> State:
        s = self.strategy
        assert isinstance(s, L1Diff)  # the form L1Diff.private_form builds
        den = float(sums[WEIGHT][0]) if denominator is None else denominator
        new = dict(state)
        if den <= 0:
            return new
        names = self.names(state)
        means = {n: sums[n] / den for n in names}
        if GAMMA in state and float(state[GAMMA]) < 0 and s.gamma_rel is not None:  # round 0 sets gamma
            total = sum(float(m.abs().sum()) for m in means.values())
            count = sum(m.numel() for m in means.values())
            new[GAMMA] = torch.tensor(s.gamma_rel * total / max(1, count), dtype=torch.float64)
        gamma = max(0.0, float(new[GAMMA])) if GAMMA in new else s.gamma
        segmented = self.segmented(state)
        for n in names:
            m = means[n]
            if segmented:  # the summed segment means, spread over their segments
                m = expand(m, lengths_of(state[SEGMENTS + n])).reshape(state[n].shape)
            elif self.segments_every >= 2:  # a dense round: the prox of the mean, whose runs are public next
                m, lengths = segmentation(m, gamma, s.block_size)
                new[SEGMENTS + n] = boundary_mask(lengths, m.numel())
            new[n] = (state[n].double() - (s.server_lr * s.eta) * m).to(state[n].dtype)
        if self.segments_every >= 2:
            left = int(state[SEGMENTS_LEFT]) - 1 if segmented else self.segments_every - 1
            new[SEGMENTS_LEFT] = torch.tensor(left, dtype=torch.int64)
        return new


class PartialForm(DenseForm):
    """Partial exchange: every tensor masked (zeros where not sent), with per-tensor weights."""

    def layout(self, state: State, weighted: bool, rows: torch.Tensor | None = None) -> dict[str, tuple[int, ...]]:
        out = {n: tuple(state[n].shape) for n in self.names(state)}
        if weighted:
            out[COUNT] = (len(out),)
        return out

    def contribution(
        self, download: Payload, upload: Payload, weight: float | None, request: Payload | None = None
    ) -> dict[str, torch.Tensor]:
        a = 1.0 if weight is None else weight
        names = self.names(download)
        out = {}
        for n in names:
            sent = n in upload
            out[n] = (
                a * (upload[n].double() - download[n].double())
                if sent
                else torch.zeros(download[n].shape, dtype=torch.float64)
            )
        if weight is not None:
            out[COUNT] = torch.tensor([a if n in upload else 0.0 for n in names], dtype=torch.float64)
        return out

    def finish(self, state: State, sums: dict[str, torch.Tensor], denominator: float | None) -> State:
        new = dict(state)
        names = self.names(state)
        for i, n in enumerate(names):
            den = float(sums[COUNT][i]) if denominator is None else denominator
            if den > 0:
                new[n] = (state[n].double() + sums[n] / den).to(state[n].dtype)
        return new


class RowsForm(DenseForm):
    """FedSS family and FedAwS/FedALC: a dense body plus class rows over the round's row set.

    Args:
        strategy: the algorithm; it builds its form (``Strategy.private_form``) with the rest.
        fedss: the FedSS family's payloads (``class_ids``/``num_positives``/``rows``), else FedAwS's
            (``class_id`` and one row ``w``).
        key: the state's row matrix (FedSS: the class embeddings; FedAwS: ``W``).
        body_prefix: FedAwS: the prefix of the body's tensors (None: every floating tensor but the rows).
        table_key: FedALC-fixed: the state entry clients read their rows from instead of ``key``.
        uploads_rows: whether clients train and upload their rows (False: fixed embeddings).
        requestless: every client uses every row anyway (FullSoftmax): no private request union.
        after_rows: FedAwS/FedALC: ``(state, W) -> W``, the server's step after the rows moved (spreadout).
        rows_over_round: FedSS's ``row_aggregation="algorithm1"``: a weighted round divides each row's
            summed update by the round's total weight, not by its senders' (as the plain
            ``FedSS.aggregate`` does).
    """

    has_rows = True

    def __init__(
        self,
        strategy: Strategy,
        *,
        fedss: bool,
        key: str,
        body_prefix: str | None = None,
        table_key: str | None = None,
        uploads_rows: bool = True,
        requestless: bool = False,
        after_rows: Callable[[State, torch.Tensor], torch.Tensor] | None = None,
        rows_over_round: bool = False,
    ) -> None:
        super().__init__(strategy)
        self.rows_over_round = rows_over_round
        self.fedss, self.key, self.body_prefix, self.table_key = fedss, key, body_prefix, table_key
        self.uploads_rows, self._requestless, self.after_rows = uploads_rows, requestless, after_rows

    def names(self, state: State) -> list[str]:
        if self.body_prefix is not None:
            return sorted(n for n in state if n.startswith(self.body_prefix))
        skip = (self.key, ROWS, ROUND_ROWS)  # the body: a state's or a download's tensors but the rows
        return sorted(
            n for n, t in state.items() if n not in skip and t.is_floating_point() and not n.startswith(SERVER)
        )

    def table(self, state: State) -> torch.Tensor:
        """The row matrix clients read (FedALC-fixed: its fixed embeddings)."""
        return state[self.table_key] if (self.table_key is not None and self.table_key in state) else state[self.key]

    def num_rows(self, state: State) -> int:
        return int(state[self.key].shape[0])

    def requestless(self) -> bool:
        """Whether every client uses every row anyway (FullSoftmax)."""
        return self._requestless

    def request_rows(self, request: Payload | None, num_rows: int) -> torch.Tensor:
        """The rows a client's ordinary request asks for (int64, sorted unique)."""
        if request is None:
            return torch.arange(num_rows, dtype=torch.int64)
        ids = request["class_ids"] if "class_ids" in request else request["class_id"]
        return torch.unique(ids.reshape(-1).to(torch.int64))

    def indicator(self, request: Payload | None, num_rows: int) -> dict[str, torch.Tensor]:
        """The 0/1 vector over all rows that the private request union sums."""
        v = torch.zeros(num_rows, dtype=torch.float64)
        v[self.request_rows(request, num_rows)] = 1.0
        return {"requested": v}

    def layout(self, state: State, weighted: bool, rows: torch.Tensor | None = None) -> dict[str, tuple[int, ...]]:
        assert rows is not None
        out = {n: tuple(state[n].shape) for n in self.names(state)}
        if self.uploads_rows:
            out[ROWS] = (int(rows.numel()), int(state[self.key].shape[1]))
            if weighted:
                out[ROW_COUNT] = (int(rows.numel()),)
        if weighted:
            out[WEIGHT] = (1,)
        return out

    def download(self, state: State, client_id: int, round: int, seed: int, rows: torch.Tensor | None) -> Payload:
        """The same for every client of the round: the body and the rows ``U`` with their ids."""
        assert rows is not None
        out = {n: state[n] for n in self.names(state)}
        out[ROUND_ROWS] = rows
        out[ROWS] = self.table(state).index_select(0, rows)
        return out

    def local_payload(self, download: Payload, request: Payload | None) -> Payload:
        """Client side: its ordinary payload cut out of the round's download."""
        rows = download[ROUND_ROWS]
        body = {n: t for n, t in download.items() if n not in (ROUND_ROWS, ROWS)}
        if request is None:  # FullSoftmax
            ids = rows
            num_pos = torch.tensor([rows.numel()], dtype=torch.int64)
        elif self.fedss:
            ids, num_pos = request["class_ids"], request["num_positives"]
        else:
            ids, num_pos = request["class_id"].reshape(1), torch.ones(1, dtype=torch.int64)  # unused by FedAwS
        pos = torch.searchsorted(rows, ids)
        if bool((pos >= rows.numel()).any()) or not bool((rows[pos.clamp(max=rows.numel() - 1)] == ids).all()):
            raise ValueError("the round's rows lack rows this client asked for")
        picked = download[ROWS].index_select(0, pos)
        if self.fedss:
            return {**body, "class_ids": ids, "num_positives": num_pos, "rows": picked}
        return {**body, "w": picked[0].clone()}

    def contribution(
        self, download: Payload, upload: Payload, weight: float | None, request: Payload | None = None
    ) -> dict[str, torch.Tensor]:
        a = 1.0 if weight is None else weight
        out = {n: a * (upload[n].double() - download[n].double()) for n in self.names(download)}
        rows = download[ROUND_ROWS]
        if self.uploads_rows:
            local = self.local_payload(download, request)
            if self.fedss:
                ids, old, new = upload["class_ids"], local["rows"], upload["rows"]
            else:
                ids, old, new = request["class_id"].reshape(1), local["w"].reshape(1, -1), upload["w"].reshape(1, -1)  # type: ignore[index]
            pos = torch.searchsorted(rows, ids)
            delta = torch.zeros(rows.numel(), download[ROWS].shape[1], dtype=torch.float64)
            delta.index_add_(0, pos, a * (new.double() - old.double()))
            out[ROWS] = delta
            if weight is not None:
                cnt = torch.zeros(rows.numel(), dtype=torch.float64)
                cnt[pos] = a
                out[ROW_COUNT] = cnt
        if weight is not None:
            out[WEIGHT] = torch.tensor([a], dtype=torch.float64)
        return out

    def finish(
        self,
        state: State,
        sums: dict[str, torch.Tensor],
        denominator: float | None,
        rows: torch.Tensor | None = None,
    ) -> State:
        """Body as DenseForm; row ``U[i]`` moves by ``sums[ROWS][i] / (its weight or the denominator)``
        (then FedAwS/FedALC take their spreadout step)."""
        den = float(sums[WEIGHT][0]) if denominator is None else denominator
        new = dict(state)
        if den > 0:
            for n in self.names(state):
                new[n] = (state[n].double() + sums[n] / den).to(state[n].dtype)
        if self.fedss:
            W = state[self.key].clone()
            if self.uploads_rows and rows is not None and rows.numel():
                per = (
                    sums[ROW_COUNT]
                    if denominator is None and not self.rows_over_round
                    else torch.full((rows.numel(),), den, dtype=torch.float64)
                )
                keep = per > 0
                step = sums[ROWS][keep] / per[keep].unsqueeze(1)
                W[rows[keep]] = (W[rows[keep]].double() + step).to(W.dtype)
            new[self.key] = W
            return new
        W = state[self.key].clone()
        if self.uploads_rows:
            if rows is not None and rows.numel():
                per = (
                    sums[ROW_COUNT]
                    if denominator is None
                    else torch.full((rows.numel(),), denominator, dtype=torch.float64)
                )
                keep = per > 0
                step = sums[ROWS][keep] / per[keep].unsqueeze(1)
                W[rows[keep]] = (W[rows[keep]].double() + step).to(W.dtype)
            if self.after_rows is not None:
                W = self.after_rows(state, W)
        else:  # FedALC-fixed's learned rows, or the initial rows FedAvg-fixed keeps
            W = self.table(state).clone()
        new[self.key] = W
        return new


def form_of(strategy: Strategy, segments_every: int = 0) -> DenseForm:
    """The form of ``strategy``'s round: what the strategy declares (:meth:`Strategy.private_form`).

    Raises:
        ValueError: a strategy that cannot be summed (the reason), or ``segments_every`` for a strategy
            other than L1Diff.
    """
    return strategy.private_form(segments_every)
