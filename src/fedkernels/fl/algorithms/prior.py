"""The label prior as a federated baseline: every client uploads its label counts once a round, the
server sums them, and every prediction is the most frequent classes (the popularity baseline a
table's rows must beat). No model, no training."""

from __future__ import annotations

import torch

from ..payload import Payload, PayloadError, PayloadSpec, TensorSpec
from ..strategy import State, Strategy
from ..types import ClientData, ClientResult, TrainConfig

COUNTS = "counts"  # float64 [p]: the summed label counts of the last round's clients


class LabelPrior(Strategy):
    """Predicts the ``k`` classes with the most training labels among the round's clients (with every
    client taking part: the whole training set's label frequencies; ties to the smaller class id)."""

    name = "LabelPrior"

    def private_form(self, segments_every: int = 0):
        """None: refused with the reason."""
        raise ValueError(
            "LabelPrior uploads label counts, not a model update, so it has no private form; run it without "
            "--secagg/--dp-*"
        )

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        return {COUNTS: torch.zeros(num_classes, dtype=torch.float64, device="cpu")}

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        return {}

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        return {COUNTS: torch.bincount(data.indices, minlength=data.num_classes).to(torch.float64)}

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        return PayloadSpec({COUNTS: TensorSpec(torch.float64, tuple(state[COUNTS].shape))})

    def check_upload(
        self, state: State, payload_sent: Payload, upload: Payload, request: Payload | None = None
    ) -> Payload:
        """Counts must be finite and >= 0."""
        if bool((upload[COUNTS] < 0).any()):
            raise PayloadError("label counts must be >= 0")
        return upload

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        total = torch.zeros_like(state[COUNTS])
        for r in results:  # client order: deterministic
            total += r.payload[COUNTS]
        return {COUNTS: total}

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        order = torch.sort(-state[COUNTS], stable=True).indices  # count descending, ties to the smaller id
        return order[:k].unsqueeze(0).expand(x.shape[0], k).clone()

    def model_bytes(self, state: State) -> int:
        return 0
