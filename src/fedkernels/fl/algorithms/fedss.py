"""FedSS (federated sampled softmax, Waghmare et al. 2022) and its NegOnly / PosOnly / FullSoftmax variants.

The model is an MLP body ``F -> hidden... -> d`` (the representation) and a class matrix ``W [p, d]``
(logits ``body(x) @ W.T``). Each round a client:

1. asks for the rows of its positive classes ``P_k`` plus ``m`` negatives drawn uniformly from the
   classes it does not hold (``fedkernels.sample_negatives``) — the request is the list of class ids;
2. receives the body and those rows, trains the sampled-softmax loss with the logQ correction
   (``fedkernels.nn.SampledSoftmaxHead`` on ``fedkernels.linear_cross_entropy``), multi-label
   samples contributing one term per (sample, label) pair;
3. sends back the body and the updated rows with their ids.

The server averages the bodies (weighted by sample counts) and folds the row updates into ``W`` as
the paper's Algorithm 1 does (line 12): each client's update to a row, weighted by its sample count,
over the total count of the round's clients, so a row few clients sent moves by their share of the
round (``fl.aggregate.weighted_rows_update``; rows nobody sent keep their value). The option
``row_aggregation="senders"`` moves each sent row to the weighted mean of the clients that sent it
instead (``fl.aggregate.weighted_rows_mean`` on ``fedkernels.scatter_rows_mean``).

Variants change only which rows are requested and which classes compete in the loss:
``FedSS`` (positives + negatives), ``NegOnly`` (the example's target + negatives), ``PosOnly``
(positives only, no negatives requested), ``FullSoftmax`` (every class: downloads all of ``W``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...nn.sampled_softmax import SampledSoftmaxHead
from ...ops.sampled import sample_negatives
from ...ops.spread import spreadout_loss
from ..aggregate import weighted_average, weighted_rows_mean, weighted_rows_update
from ..local import train_local
from ..models import load_state, mlp, state_of, topk_ids
from ..payload import Payload, PayloadError, PayloadSpec, TensorSpec, state_spec
from ..seeding import derive_seed, generator
from ..strategy import SERVER, State, Strategy
from ..types import ClientData, ClientResult, TrainConfig

CLASSES = "classes"  # the state's class matrix W [p, d]; every other state entry is the body
MOMENTUM = SERVER + "momentum."  # server_momentum's velocity per model tensor (server-side only)
ROW_AGGREGATIONS = ("algorithm1", "senders")


def _pairs(batch: ClientData) -> tuple[torch.Tensor, torch.Tensor]:
    """(sample index, label) for every label of every sample in the batch: int64 ``[nnz]`` each."""
    rows = torch.repeat_interleave(torch.arange(len(batch), device=batch.indptr.device), batch.indptr.diff())
    return rows, batch.indices


def _co_positive_pairs(indptr: torch.Tensor, rows: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """For the (sample, label) pairs of :func:`_pairs`, every (pair, other label of that pair's sample)
    whose label differs from the pair's own: int64 ``[E, 2]`` of (pair index, class id)."""
    count = indptr.diff()[rows]  # labels of each pair's sample
    pair = torch.repeat_interleave(torch.arange(rows.numel(), device=rows.device), count)
    first = torch.cumsum(count, 0) - count
    partner = indptr[rows][pair] + torch.arange(pair.numel(), device=rows.device) - first[pair]
    keep = labels[partner] != labels[pair]  # a duplicated label is the pair's own target, never excluded
    return torch.stack([pair[keep], labels[partner[keep]]], dim=1)


class FedSS(Strategy):
    """Federated sampled softmax.

    Args:
        num_negatives: m, negatives per client per round (clamped to the classes the client lacks).
        embed_dim: d, the width of the representation and of the class rows.
        hidden: hidden widths of the body MLP.
        scale: logit temperature (``scale * h @ W.T``).
        cosine: cosine logits ``scale * cos(h, w_c)`` (the FedSS paper: normalised embeddings, s = 20).
        server_momentum: the server's momentum on the averaged update (FedAvgM: ``v <- beta v + delta``,
            ``x <- x + v``; the FedSS paper's 0.9); 0 is plain averaging.
        exclude_co_positives: each (sample, label) term's softmax leaves out the sample's other labels,
            so a multi-label sample's own tags do not push each other down (the paper's data is
            single-label, where this changes nothing). Not for NegOnly, which already leaves every
            other positive out.
        row_aggregation: how the server folds the class rows in. ``"algorithm1"`` (the paper's
            Algorithm 1, line 12): row r moves by ``sum_{k sent r} n_k (w_k,r - w_r) / sum_k n_k``,
            the sum in the denominator over every client of the round. ``"senders"``: row r becomes
            the ``n_k``-weighted mean of the rows its senders returned (the denominator over those
            clients alone: a row one client of the round sent moves all the way to that client's row).
            The body is FedAvg's weighted mean either way.
    """

    dp_sgd_training = True  # its client_update trains with train_local (DP-SGD applies)

    name = "FedSS"
    variant = "fedss"

    def __init__(
        self,
        num_negatives: int = 64,
        embed_dim: int = 64,
        hidden: Sequence[int] = (256,),
        scale: float = 1.0,
        cosine: bool = False,
        server_momentum: float = 0.0,
        exclude_co_positives: bool = False,
        row_aggregation: str = "algorithm1",
    ) -> None:
        if row_aggregation not in ROW_AGGREGATIONS:
            raise ValueError(f"row_aggregation must be one of {ROW_AGGREGATIONS}, got {row_aggregation!r}")
        if exclude_co_positives and self.variant == "negonly":
            raise ValueError("exclude_co_positives is not for NegOnly: it already leaves every other positive out")
        if num_negatives < 0:
            raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
        if embed_dim < 1:
            raise ValueError(f"embed_dim must be >= 1, got {embed_dim}")
        if not 0.0 <= server_momentum < 1.0:
            raise ValueError(f"server_momentum must lie in [0, 1), got {server_momentum}")
        self.num_negatives, self.embed_dim, self.hidden, self.scale = num_negatives, embed_dim, tuple(hidden), scale
        self.cosine, self.server_momentum = bool(cosine), float(server_momentum)
        self.exclude_co_positives = bool(exclude_co_positives)
        self.row_aggregation = row_aggregation

    # ---- global state: body parameters plus the class matrix

    def private_form(self, segments_every: int = 0):
        """A body plus the class rows over the round's row set (FullSoftmax: every row, no request union)."""
        from ..privacy.forms import RowsForm

        self.check_private_form(segments_every)
        return RowsForm(
            self,
            fedss=True,
            key=CLASSES,
            requestless=self.variant == "full",
            rows_over_round=self.row_aggregation == "algorithm1",
        )

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        state = state_of(mlp(num_features, self.embed_dim, self.hidden, seed))
        g = torch.Generator(device="cpu").manual_seed(derive_seed(seed, CLASSES))
        state[CLASSES] = torch.randn(num_classes, self.embed_dim, generator=g, device="cpu") / self.embed_dim**0.5
        if self.server_momentum > 0:
            state.update({MOMENTUM + k: torch.zeros_like(v) for k, v in list(state.items())})
        return state

    @staticmethod
    def _model_names(state: Payload) -> list[str]:
        return [k for k in state if not k.startswith(SERVER)]

    def _body(self, params: Payload) -> torch.nn.Module:
        # F is the first layer's input width [h, F]: the dims live in the state, not on self
        return load_state(
            mlp(params["0.weight"].shape[1], self.embed_dim, self.hidden),
            {k: v for k, v in params.items() if k in self._body_names()},
        )

    def _body_names(self) -> list[str]:
        # the names depend only on the layer count, not on F
        return list(mlp(1, self.embed_dim, self.hidden).state_dict())

    # ---- client request: which class rows to download

    def client_request(self, data: ClientData, round: int, seed: int) -> Payload | None:
        positives = torch.unique(data.indices)
        if self.variant == "fedss" or self.variant == "negonly":
            m = min(self.num_negatives, data.num_classes - positives.numel())
            negatives = sample_negatives(positives, data.num_classes, m, derive_seed(seed, "negatives"))
        elif self.variant == "posonly":
            negatives = positives[:0]
        else:  # full softmax: every row
            return None
        return {
            "class_ids": torch.cat([positives, negatives]),
            "num_positives": torch.tensor([positives.numel()], dtype=torch.int64, device=positives.device),
        }

    def request_spec(self, state: State) -> PayloadSpec | None:
        """At most ``p`` distinct class ids (an honest request is the client's distinct positives plus
        negatives it does not hold), so a download is never larger than FullSoftmax's (the body plus
        every class row once) and the request itself is at most ``8 p`` bytes plus a small header:
        anything longer is refused on its length, a repeated id before the download is built."""
        p = state[CLASSES].shape[0]
        return PayloadSpec(
            {
                "class_ids": TensorSpec(torch.int64, (None,), min_value=0, max_value=p, unique=True, max_numel=p),
                "num_positives": TensorSpec(torch.int64, (1,), min_value=0, max_value=p + 1),
            }
        )

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        body = {k: state[k] for k in self._model_names(state) if k != CLASSES}
        if request is None:  # FullSoftmax
            p, device = state[CLASSES].shape[0], state[CLASSES].device
            ids = torch.arange(p, dtype=torch.int64, device=device)
            return {
                **body,
                "class_ids": ids,
                "num_positives": torch.tensor([p], dtype=torch.int64, device=device),
                "rows": state[CLASSES].clone(),
            }
        ids = request["class_ids"]
        if int(request["num_positives"][0]) > ids.numel():
            raise PayloadError(
                f"request has num_positives = {int(request['num_positives'][0])} but only {ids.numel()} class ids"
            )
        return {
            **body,
            "class_ids": ids,
            "num_positives": request["num_positives"],
            "rows": state[CLASSES].index_select(0, ids),
        }

    # ---- client side: local training on the gathered rows

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        body = self._body(payload)
        num_pos = int(payload["num_positives"][0])
        variant = "full" if self.variant == "full" else self.variant
        head = SampledSoftmaxHead(
            payload["rows"], payload["class_ids"], num_pos, data.num_classes, variant, self.scale, self.cosine
        )

        def loss_fn(batch: ClientData) -> torch.Tensor:
            rows, labels = _pairs(batch)
            if rows.numel() == 0:
                return head.weight.sum() * 0.0
            exclude = _co_positive_pairs(batch.indptr, rows, labels) if self.exclude_co_positives else None
            return head(body(batch.x)[rows], labels, exclude=exclude)

        train_local([*body.parameters(), head.weight], loss_fn, data, config, generator(seed, "shuffle"))
        ids, rows = head.updated_rows()
        return {**state_of(body), "class_ids": ids, "rows": rows}

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        s = payload_sent["class_ids"].shape[0]
        p, d = state[CLASSES].shape
        spec = state_spec(state, [k for k in self._model_names(state) if k != CLASSES])
        spec["class_ids"] = TensorSpec(torch.int64, (s,), min_value=0, max_value=p)
        spec["rows"] = TensorSpec(state[CLASSES].dtype, (s, d))
        return PayloadSpec(spec)

    # ---- server side: body average, the class rows by row_aggregation

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        weights = [float(r.num_examples) for r in results]
        body_names = [k for k in self._model_names(state) if k != CLASSES]
        new = weighted_average([{k: r.payload[k] for k in body_names} for r in results], weights)
        # a client without data (weight 0) moves no row
        ids = [r.payload["class_ids"] for r in results]
        fold = weighted_rows_update if self.row_aggregation == "algorithm1" else weighted_rows_mean
        new[CLASSES] = fold(state[CLASSES], ids, [r.payload["rows"] for r in results], weights)
        if self.server_momentum > 0:  # FedAvgM: the averaged update, with momentum, from the old state
            for k in self._model_names(state):
                v = self.server_momentum * state[MOMENTUM + k] + (new[k] - state[k])
                new[MOMENTUM + k], new[k] = v, state[k] + v
        return new

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        h, w = self._body(state)(x), state[CLASSES]
        if self.cosine:
            h, w = torch.nn.functional.normalize(h, dim=1), torch.nn.functional.normalize(w, dim=1)
        return topk_ids(h, w, k, scale=self.scale)  # fused: no [N, p] scores

    def model_bytes(self, state: State) -> int:
        """The body and the class rows (the server's momentum left out)."""
        return sum(state[k].numel() * state[k].element_size() for k in self._model_names(state))

    @torch.no_grad()
    def embed(self, state: State, x: torch.Tensor) -> torch.Tensor:
        """The representation ``h [N, d]`` of ``x [N, F]`` (unit rows with cosine logits), for retrieval."""
        h = self._body(state)(x)
        return torch.nn.functional.normalize(h, dim=1) if self.cosine else h


class PosOnlySpread(FedSS):
    """The FedAwS baseline of the FedSS paper: positive classes only on the clients (as
    :class:`PosOnly`), and on the server FedAwS's spreadout step on the class rows after averaging
    (``spread_steps`` steps of size ``spread_lr`` on the squared hinge over each class's ``k`` nearest
    classes under ``margin``, rows renormalised with cosine logits).

    Args (beyond FedSS's): margin, k, spread_lr, spread_steps.
    """

    name = "FedSS-FedAwS"
    variant = "posonly"

    def __init__(
        self, *args, margin: float = 1.0, k: int = 10, spread_lr: float = 0.1, spread_steps: int = 1, **kw
    ) -> None:
        super().__init__(*args, **kw)
        if margin < 0 or k < 1 or spread_lr < 0 or spread_steps < 0:
            got = (margin, k, spread_lr, spread_steps)
            raise ValueError(f"need margin >= 0, k >= 1, spread_lr >= 0 and spread_steps >= 0, got {got}")
        self.margin, self.k, self.spread_lr, self.spread_steps = (
            float(margin),
            int(k),
            float(spread_lr),
            int(spread_steps),
        )

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        new = super().aggregate(state, results, round)
        W = new[CLASSES]
        kk = min(self.k, W.shape[0] - 1)
        for _ in range(self.spread_steps if kk > 0 else 0):
            Wg = W.detach().requires_grad_(True)
            (grad,) = torch.autograd.grad(spreadout_loss(Wg, self.margin, kk), Wg)
            W = W - self.spread_lr * grad
            if self.cosine:
                W = torch.nn.functional.normalize(W, dim=1)
        new[CLASSES] = W.detach()
        return new


class NegOnly(FedSS):
    """FedSS baseline: each example's loss uses only its own target and the sampled negatives."""

    name = "FedSS-NegOnly"
    variant = "negonly"


class PosOnly(FedSS):
    """FedSS baseline: only the client's positive classes (no negatives requested)."""

    name = "FedSS-PosOnly"
    variant = "posonly"


class FullSoftmax(FedSS):
    """FedSS's upper bound: every class row is downloaded and trained (full softmax)."""

    name = "FedSS-FullSoftmax"
    variant = "full"
