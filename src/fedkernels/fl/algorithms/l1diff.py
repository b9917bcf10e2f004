"""The l1-difference update (communication-efficient proximal step, docs/design.md §3).

Each round a client computes the gradient ``g`` of its local loss at the global model ``x`` and
sends ``d = (x - v) / eta`` with ``v = x + prox_tv1d(-eta g, eta gamma)``: piecewise constant, so it
travels as runs (:mod:`fedkernels.comm`). The server applies the weighted mean of the decoded
directions, ``x <- x - server_lr * eta * sum_k n_k d_k / sum_k n_k`` (``server_lr = 1`` averages the
clients' ``v``). gamma trades bytes for fidelity: gamma = 0 is plain (uncompressed-value) FedSGD.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..payload import Payload, PayloadSpec, TensorSpec
from ..strategy import State
from ..types import ClientData, ClientResult, TrainConfig
from .fedavg import FedAvg, multilabel_loss
from .l1diff_codec import check_streams, encode_direction, full_gradient, l1diff_direction


class L1Diff(FedAvg):
    """The l1-difference update with the run-length codec (FedAvg's model, download and prediction).

    Args:
        gamma: the l1-difference weight (>= 0).
        eta: the step size of the proximal step (> 0).
        hidden: MLP hidden widths.
        loss: "bce" or "softmax" (as FedAvg).
        value_dtype: "float32" (exact) or "float16" run values.
        levels: if set, run values are quantised to this many optimal k-means levels before sending.
        server_lr: scale of the averaged step on the server.
        block_size: prox_tv1d blockwise mode for long tensors (0: one row per tensor).
    """

    name = "L1Diff"

    def __init__(
        self,
        gamma: float = 0.0,
        eta: float = 0.5,
        hidden: Sequence[int] = (),
        loss: str = "bce",
        value_dtype: str = "float32",
        levels: int | None = None,
        server_lr: float = 1.0,
        block_size: int = 0,
    ) -> None:
        if not gamma >= 0 or not eta > 0 or not server_lr > 0:
            raise ValueError(f"gamma must be >= 0, eta and server_lr > 0, got {gamma}, {eta}, {server_lr}")
        if value_dtype not in ("float32", "float16"):
            raise ValueError(f"value_dtype must be 'float32' or 'float16', got {value_dtype!r}")
        if levels is not None and levels < 1:
            raise ValueError(f"levels must be >= 1, got {levels}")
        super().__init__(hidden, loss)
        self.gamma, self.eta, self.server_lr = float(gamma), float(eta), float(server_lr)
        self.value_dtype, self.levels = value_dtype, levels
        self.block_size = block_size

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        model = self._model(payload)
        names = [n for n, _ in model.named_parameters()]
        params = [p for _, p in model.named_parameters()]
        grads = full_gradient(params, lambda b: multilabel_loss(model(b.x), b, self.loss), data, config.batch_size)
        return {
            n: encode_direction(
                l1diff_direction(g, self.gamma, self.eta, self.block_size), self.value_dtype, self.levels
            )
            for n, g in zip(names, grads, strict=True)
        }

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        return PayloadSpec({n: TensorSpec(torch.uint8, (None,)) for n in state})

    def check_upload(
        self, state: State, payload_sent: Payload, upload: Payload, request: Payload | None = None
    ) -> Payload:
        """Decode every stream (PayloadError if one is corrupt, mis-shaped or non-finite): the checked
        upload is the float32 directions, so aggregate decodes nothing."""
        return check_streams(upload, {n: t.shape for n, t in state.items()}, self.value_dtype)

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        decoded = [r.payload for r in results]  # check_upload's decoded directions
        weights = [float(r.num_examples) for r in results]
        total = sum(weights)
        new = {}
        for n in state:
            step = torch.zeros_like(state[n], dtype=torch.float32)
            for d, w in zip(decoded, weights, strict=True):  # client order: deterministic
                step.add_(d[n], alpha=w / total)
            new[n] = (state[n] - (self.server_lr * self.eta) * step).to(state[n].dtype)
        return new
