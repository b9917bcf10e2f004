"""Partial weight exchange: each client trains the whole model but uploads only the
``ceil(p * M)`` tensors whose weights changed most (L2 norm of after - before, or its RMS); the
server averages each tensor over the clients that sent it, weighted by their sample counts, and
keeps the others. Hot paths: ``select_topk_tensors`` (client) and ``masked_weighted_average``
(server), through ``fedkernels.fl.partial_exchange``."""

from __future__ import annotations

from collections.abc import Sequence

from ..batched import LocalProblem
from ..local import train_local
from ..models import state_of
from ..partial_exchange import apply_partial_payloads, make_partial_payload
from ..payload import Payload, PayloadSpec, state_spec
from ..seeding import generator
from ..strategy import State
from ..types import ClientData, ClientResult, TrainConfig
from .fedavg import FedAvg, multilabel_loss, multilabel_problem


class PartialExchange(FedAvg):
    """FedAvg's model and download, with a partial upload.

    Args:
        fraction: p in ``(0, 1]``, the share of the model's M tensors a client uploads
            (``ceil(p * M)``, at least one); p = 1 is FedAvg.
        normalize: rank tensors by RMS change (norm / sqrt(numel)) instead of the plain norm.
        hidden: hidden widths, as in :class:`FedAvg`.
        loss: ``"bce"`` or ``"softmax"``, as in :class:`FedAvg`.
    """

    name = "PartialExchange"

    def __init__(
        self, fraction: float = 0.5, normalize: bool = False, hidden: Sequence[int] = (256,), loss: str = "bce"
    ) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
        super().__init__(hidden=hidden, loss=loss)
        self.fraction, self.normalize = float(fraction), bool(normalize)

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        model = self._model(payload)
        train_local(
            list(model.parameters()),
            lambda b: multilabel_loss(model(b.x), b, self.loss),
            data,
            config,
            generator(seed, "shuffle"),
        )
        return make_partial_payload(payload, state_of(model), self.fraction, self.normalize)["tensors"]

    def local_problem(
        self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int
    ) -> LocalProblem | None:
        model = self._skeleton(payload)
        return multilabel_problem(
            model,
            {n: payload[n] for n, _ in model.named_parameters()},
            data,
            self.loss,
            seed,
            lambda p: make_partial_payload(payload, p, self.fraction, self.normalize)["tensors"],
        )

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        # Any subset of the model's tensors, each with its exact dtype and shape.
        return PayloadSpec(required={}, optional=state_spec(state))

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        new = {k: v.clone() for k, v in state.items()}
        apply_partial_payloads(new, [({"tensors": r.payload}, float(r.num_examples)) for r in results])
        return new
