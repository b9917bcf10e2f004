"""The l1-difference update (communication-efficient proximal step, docs/design.md §3).

Each round a client computes the gradient ``g`` of its local loss at the global model ``x`` and
sends ``d = (x - v) / eta`` with ``v = x + prox_tv1d(-eta g, eta gamma)``: piecewise constant, so it
travels as runs (:mod:`fedkernels.comm`). The server applies the weighted mean of the decoded
directions, ``x <- x - server_lr * eta * sum_k n_k d_k / sum_k n_k`` (``server_lr = 1`` averages the
clients' ``v``). gamma trades bytes for fidelity: gamma = 0 is plain (uncompressed-value) FedSGD.

``gamma_rel`` sets gamma relative to the run's own gradient scale: round 0 sends exact gradients
(gamma = 0) and the server sets ``gamma = gamma_rel * mean |g0|``, with ``g0`` the example-weighted
mean of round 0's gradients at the initial model (the whole training set's gradient when every client
takes part), on the data the run loads (raw or unit-norm features alike). The download carries gamma.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...comm import max_stream_bytes
from ..payload import Payload, PayloadError, PayloadSpec, TensorSpec
from ..strategy import SERVER, State
from ..types import ClientData, ClientResult, TrainConfig
from .fedavg import FedAvg, multilabel_loss
from .l1diff_codec import check_streams, encode_direction, full_gradient, l1diff_direction

GAMMA = SERVER + "gamma"  # float64 []: gamma_rel's gamma once round 0 set it (-1 before)
GAMMA_SENT = "l1.gamma"  # float64 [1]: the gamma a client applies, in its download


def received_gamma(payload: Payload, default: float) -> float:
    """The gamma the server sent in ``payload`` (``default`` for a download without one)."""
    sent = payload.get(GAMMA_SENT)
    if sent is None:
        return default
    gamma = float(sent.reshape(-1)[0]) if sent.numel() == 1 else float("nan")
    if not gamma >= 0 or gamma == float("inf"):
        raise PayloadError(f"the download's gamma must be one finite value >= 0, got {sent}")
    return gamma


def l1diff_model_names(state: Payload) -> list[str]:
    """The model's tensors in a state or download: the server-only entries and the sent gamma left out."""
    return [n for n in state if not n.startswith(SERVER) and n != GAMMA_SENT]


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
        gamma_rel: if set, gamma is this multiple of the run's mean |g0| (see the module docstring)
            and ``gamma`` is ignored.
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
        gamma_rel: float | None = None,
    ) -> None:
        if gamma_rel is not None and not gamma_rel >= 0:
            raise ValueError(f"gamma_rel must be >= 0, got {gamma_rel}")
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
        self.gamma_rel = None if gamma_rel is None else float(gamma_rel)

    private_segments = True

    def private_form(self, segments_every: int = 0):
        """The decoded directions summed (with ``segments_every`` >= 2, public segments in between)."""
        from ..privacy.forms import L1DiffForm

        self.check_private_form(segments_every)
        return L1DiffForm(self, segments_every)

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        state = super().init_state(num_features, num_classes, seed)
        if self.gamma_rel is not None:
            state[GAMMA] = torch.tensor(-1.0, dtype=torch.float64, device="cpu")
        return state

    @staticmethod
    def _model_names(state: Payload) -> list[str]:
        return l1diff_model_names(state)

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        out = {n: state[n] for n in self._model_names(state)}
        gamma = max(0.0, float(state[GAMMA])) if GAMMA in state else self.gamma
        device = next(iter(out.values())).device if out else torch.device("cpu")
        out[GAMMA_SENT] = torch.tensor([gamma], dtype=torch.float64, device=device)
        return out

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        gamma = self._received_gamma(payload)
        model = self._model({n: payload[n] for n in self._model_names(payload)})
        names = [n for n, _ in model.named_parameters()]
        params = [p for _, p in model.named_parameters()]
        grads = full_gradient(params, lambda b: multilabel_loss(model(b.x), b, self.loss), data, config.batch_size)
        return {
            n: encode_direction(l1diff_direction(g, gamma, self.eta, self.block_size), self.value_dtype, self.levels)
            for n, g in zip(names, grads, strict=True)
        }

    def _received_gamma(self, payload: Payload) -> float:
        return received_gamma(payload, self.gamma)

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        # each stream at most the longest valid one of its tensor: bytes bounded by the model's size
        return PayloadSpec(
            {
                n: TensorSpec(torch.uint8, (None,), max_numel=max_stream_bytes(state[n].shape, self.value_dtype))
                for n in self._model_names(state)
            }
        )

    def check_upload(
        self, state: State, payload_sent: Payload, upload: Payload, request: Payload | None = None
    ) -> Payload:
        """Decode every stream (PayloadError if one is corrupt, mis-shaped or non-finite): the checked
        upload is the float32 directions, so aggregate decodes nothing."""
        return check_streams(upload, {n: state[n].shape for n in self._model_names(state)}, self.value_dtype)

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        decoded = [r.payload for r in results]  # check_upload's decoded directions
        weights = [float(r.num_examples) for r in results]
        total = sum(weights)
        new = {n: t for n, t in state.items() if n.startswith(SERVER)}
        abs_sum, count = 0.0, 0
        for n in self._model_names(state):
            step = torch.zeros_like(state[n], dtype=torch.float32)
            for d, w in zip(decoded, weights, strict=True):  # client order: deterministic
                step.add_(d[n], alpha=w / total)
            new[n] = (state[n] - (self.server_lr * self.eta) * step).to(state[n].dtype)
            abs_sum, count = abs_sum + float(step.double().abs().sum()), count + step.numel()
        if GAMMA in state and float(state[GAMMA]) < 0 and self.gamma_rel is not None:  # round 0 sets gamma
            gamma = self.gamma_rel * abs_sum / max(1, count)
            new[GAMMA] = torch.tensor(gamma, dtype=torch.float64, device=state[GAMMA].device)
        return new
