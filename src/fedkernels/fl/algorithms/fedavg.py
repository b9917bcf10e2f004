"""FedAvg (McMahan et al. 2017): every client trains the whole model; the server averages the
models weighted by the clients' sample counts. The baseline of every comparison."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..aggregate import weighted_average
from ..local import train_local
from ..models import load_state, mlp, model_topk_ids, state_of
from ..payload import Payload, PayloadSpec, state_spec
from ..seeding import generator
from ..strategy import State, Strategy
from ..types import ClientData, ClientResult, TrainConfig

__all__ = ["FedAvg", "multilabel_loss", "weighted_average"]  # weighted_average: from ..aggregate


def multilabel_loss(logits: torch.Tensor, batch: ClientData, loss: str) -> torch.Tensor:
    """BCE over all classes, or softmax cross-entropy against the uniform distribution over a
    sample's positives (samples without labels are skipped)."""
    y = batch.dense_labels()
    if loss == "bce":
        return F.binary_cross_entropy_with_logits(logits, y)
    if loss == "softmax":
        n_pos = y.sum(1, keepdim=True)
        keep = n_pos.squeeze(1) > 0
        if not bool(keep.any()):
            return logits.sum() * 0.0
        return -(F.log_softmax(logits[keep], 1) * (y[keep] / n_pos[keep])).sum(1).mean()
    raise ValueError(f"loss must be 'bce' or 'softmax', got {loss!r}")


class FedAvg(Strategy):
    """FedAvg with an MLP classifier over all p classes.

    Args:
        hidden: hidden layer widths of the MLP.
        loss: "bce" (one-vs-all) or "softmax" (full softmax).
    """

    name = "FedAvg"

    def __init__(self, hidden: Sequence[int] = (256,), loss: str = "bce") -> None:
        if loss not in ("bce", "softmax"):
            raise ValueError(f"loss must be 'bce' or 'softmax', got {loss!r}")
        self.hidden, self.loss = tuple(hidden), loss

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        return state_of(mlp(num_features, num_classes, self.hidden, seed))

    def _model(self, state: State) -> torch.nn.Module:
        # the dims are the state's: first layer [h, F], last layer [C, h] (no per-run state on self)
        num_features, num_classes = state["0.weight"].shape[1], state[f"{2 * len(self.hidden)}.weight"].shape[0]
        return load_state(mlp(num_features, num_classes, self.hidden), state)

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        return dict(state)

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        model = self._model(payload)
        train_local(
            list(model.parameters()),
            lambda b: multilabel_loss(model(b.x), b, self.loss),
            data,
            config,
            generator(seed, "shuffle"),
        )
        return state_of(model)

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        return PayloadSpec(state_spec(state))

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        return weighted_average([r.payload for r in results], [float(r.num_examples) for r in results])

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        return model_topk_ids(self._model(state), x, k)  # fused last layer: no [N, p] logits
