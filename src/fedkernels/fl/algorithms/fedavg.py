"""FedAvg (McMahan et al. 2017): every client trains the whole model; the server averages the
models weighted by the clients' sample counts. The baseline of every comparison."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..aggregate import weighted_average
from ..batched import LocalProblem, call_module
from ..local import train_local
from ..models import load_state, mlp, mlp_skeleton, model_topk_ids, res_mlp, res_mlp_skeleton, state_of
from ..payload import Payload, PayloadSpec, state_spec
from ..seeding import generator
from ..strategy import SERVER, State, Strategy
from ..types import ClientData, ClientResult, TrainConfig

__all__ = ["FedAvg", "multilabel_loss", "weighted_average"]  # weighted_average: from ..aggregate

# Dense [n, p] label targets of a batched local problem are built only up to this many entries
# (larger clients train one by one, with labels densified per minibatch).
MAX_DENSE_TARGETS = 1 << 26


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


def bce_rows(module: torch.nn.Module, params: dict, consts: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each row's share of :func:`multilabel_loss` ``"bce"`` (its mean over the classes): ``[B]``."""
    return F.binary_cross_entropy_with_logits(call_module(module, params, x), y, reduction="none").mean(1)


def softmax_rows(module: torch.nn.Module, params: dict, consts: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Each row's :func:`multilabel_loss` ``"softmax"`` term (0 for a row without labels, which the
    problem's row weight leaves out of the mean): ``[B]``."""
    logp = F.log_softmax(call_module(module, params, x), 1)
    return -(logp * (y / y.sum(1, keepdim=True).clamp_min(1.0))).sum(1)


def multilabel_problem(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    data: ClientData,
    loss: str,
    seed: int,
    finish: Callable[[dict[str, torch.Tensor]], Payload],
) -> LocalProblem | None:
    """The local problem of training ``model`` (a skeleton: its weights are ``params``) on
    :func:`multilabel_loss` (``None`` if the dense targets would exceed :data:`MAX_DENSE_TARGETS`)."""
    if len(data) * data.num_classes > MAX_DENSE_TARGETS:
        return None
    y = data.dense_labels()
    weight = (y.sum(1) > 0).float() if loss == "softmax" else torch.ones(len(data), device=y.device)
    rows = softmax_rows if loss == "softmax" else bce_rows
    return LocalProblem(model, params, rows, y, weight, finish, generator(seed, "shuffle"), key=(loss,))


class FedAvg(Strategy):
    """FedAvg with an MLP classifier over all p classes.

    Args:
        hidden: hidden layer widths of the MLP (``model="resmlp"``: one width, the blocks' width).
        loss: "bce" (one-vs-all) or "softmax" (full softmax).
        model: ``"mlp"`` (:func:`~fedkernels.fl.models.mlp`) or ``"resmlp"``
            (:func:`~fedkernels.fl.models.res_mlp`: ``blocks`` residual blocks, ``4 + 4 * blocks`` tensors).
        blocks: residual blocks of ``model="resmlp"``.
    """

    dp_sgd_training = True  # its client_update trains with train_local (DP-SGD applies)

    name = "FedAvg"

    def __init__(self, hidden: Sequence[int] = (256,), loss: str = "bce", model: str = "mlp", blocks: int = 12) -> None:
        if loss not in ("bce", "softmax"):
            raise ValueError(f"loss must be 'bce' or 'softmax', got {loss!r}")
        if model not in ("mlp", "resmlp"):
            raise ValueError(f"model must be 'mlp' or 'resmlp', got {model!r}")
        if model == "resmlp" and (len(tuple(hidden)) != 1 or int(blocks) < 0):
            raise ValueError(f"model='resmlp' takes one hidden width and blocks >= 0, got {tuple(hidden)}, {blocks}")
        self.hidden, self.loss, self.model, self.blocks = tuple(hidden), loss, model, int(blocks)

    def _build(self, num_features: int, num_classes: int, seed: int = 0) -> torch.nn.Module:
        if self.model == "resmlp":
            return res_mlp(num_features, num_classes, self.hidden[0], self.blocks, seed)
        return mlp(num_features, num_classes, self.hidden, seed)

    def _dims(self, state: State) -> tuple[int, int]:
        """``(F, C)`` from the state (first layer ``[h, F]``, last layer ``[C, h]``): no per-run state on self."""
        last = self.blocks + 2 if self.model == "resmlp" else 2 * len(self.hidden)
        return int(state["0.weight"].shape[1]), int(state[f"{last}.weight"].shape[0])

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        return state_of(self._build(num_features, num_classes, seed))

    def _model(self, state: State) -> torch.nn.Module:
        return load_state(self._build(*self._dims(state)), state)

    def _skeleton(self, state: State) -> torch.nn.Module:
        """The model's architecture for ``state`` on the meta device (no weights)."""
        if self.model == "resmlp":
            return res_mlp_skeleton(*self._dims(state), self.hidden[0], self.blocks)
        return mlp_skeleton(*self._dims(state), self.hidden)

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

    def local_problem(
        self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int
    ) -> LocalProblem | None:
        model = self._skeleton(payload)
        params = {n: payload[n] for n, _ in model.named_parameters()}  # an MLP's state: parameters only
        return multilabel_problem(model, params, data, self.loss, seed, lambda p: {n: p[n] for n in params})

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        return PayloadSpec(state_spec(state))

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        return weighted_average([r.payload for r in results], [float(r.num_examples) for r in results])

    @staticmethod
    def _model_names(state: Payload) -> list[str]:
        """The model's tensors in ``state``: every entry but the server-only ones (``SERVER`` prefix)."""
        return [n for n in state if not n.startswith(SERVER)]

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        model = self._model({n: state[n] for n in self._model_names(state)})
        return model_topk_ids(model, x, k)  # fused last layer: no [N, p] logits

    def model_bytes(self, state: State) -> int:
        return sum(state[n].numel() * state[n].element_size() for n in self._model_names(state))
