"""Partial weight exchange: each client trains the whole model but uploads only the tensors whose
weights changed most (the top ``ceil(p * M)`` by drift, or every tensor whose drift exceeds a threshold
theta); the server averages each tensor over the clients that sent it, weighted by their sample counts.

With ``keep_unreceived`` (the default, as in the authors' code, FL4Health's ``PartialWeightExchangeClient``
and ``FedAvgDynamicLayer``) the exchange is partial both ways: the server sends only the tensors it
aggregated in the previous round (the whole model to a client the first time), and each client keeps
its own values of the tensors it did not receive, so clients hold personalised models and are evaluated
per client (``Server.evaluate_clients``). Without it, the server keeps the tensors nobody sent and
every client downloads the whole global model. Hot paths: ``select_topk_tensors`` / ``delta_norms``
(client) and ``masked_weighted_average`` (server), through ``fedkernels.fl.partial_exchange``."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..batched import LocalProblem
from ..local import train_local
from ..models import state_of
from ..partial_exchange import DRIFTS, apply_partial_payloads, candidate_names, make_partial_payload
from ..payload import Payload, PayloadError, PayloadSpec, state_spec
from ..seeding import generator
from ..strategy import SERVER, State
from ..types import ClientData, ClientResult, TrainConfig
from .fedavg import FedAvg, multilabel_loss, multilabel_problem

FRESH = SERVER + "fresh"  # uint8 [M]: the model tensors aggregated in the last round (sent next round)
SYNCED = SERVER + "synced"  # uint8 [num_clients]: clients that hold a whole model (keep_unreceived)


class PartialExchange(FedAvg):
    """FedAvg's model with a partial upload (and, with ``keep_unreceived``, a partial download).

    Args:
        fraction: p in ``(0, 1]``, the share of the model's M tensors a client uploads
            (``ceil(p * M)``, at least one); p = 1 is FedAvg (with ``keep_unreceived``: FedAvg whose
            clients also receive every tensor).
        normalize: rank tensors by RMS change (norm / sqrt(numel)) instead of the plain norm
            (``drift="rms"``; ``drift`` overrides it).
        hidden: hidden layer sizes of the model, as in :class:`FedAvg`.
        loss: the training loss, as in :class:`FedAvg`.
        model: ``"mlp"`` or ``"resmlp"``, as in :class:`FedAvg`.
        blocks: residual blocks of ``model="resmlp"``, as in :class:`FedAvg`.
        keep_unreceived: the authors' semantics (see the module docstring); False: the server keeps
            stale tensors and sends the whole model.
        drift: ``"norm"``, ``"rms"`` or ``"numel"`` (FL4Health's ``normalize=True``: ``||d|| / numel``).
        threshold: if set, theta selection: upload every tensor whose drift exceeds it (FL4Health's
            ``select_by_threshold``) instead of the top ``fraction``.
    """

    dp_sgd_training = True  # its client_update trains with train_local (DP-SGD applies)

    name = "PartialExchange"

    def __init__(
        self,
        fraction: float = 0.5,
        normalize: bool = False,
        hidden: Sequence[int] = (256,),
        loss: str = "bce",
        keep_unreceived: bool = True,
        drift: str | None = None,
        threshold: float | None = None,
        model: str = "mlp",
        blocks: int = 12,
    ) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
        if drift is not None and drift not in DRIFTS:
            raise ValueError(f"drift must be one of {DRIFTS}, got {drift!r}")
        if threshold is not None and not threshold >= 0:
            raise ValueError(f"threshold must be >= 0, got {threshold}")
        super().__init__(hidden=hidden, loss=loss, model=model, blocks=blocks)
        self.fraction, self.normalize = float(fraction), bool(normalize)
        self.keep_unreceived = bool(keep_unreceived)
        self.drift = drift or ("rms" if normalize else "norm")
        self.threshold = None if threshold is None else float(threshold)

    @property
    def stateful_clients(self) -> bool:
        return self.keep_unreceived

    def _select(self, before: Payload, after: dict[str, torch.Tensor]) -> Payload:
        return make_partial_payload(before, after, self.fraction, drift=self.drift, threshold=self.threshold)["tensors"]

    # ---- server side

    def setup_needs_client_data(self) -> bool:
        return self.keep_unreceived  # only the per-client SYNCED flags need the client count

    def setup(self, clients: Sequence[ClientData], seed: int) -> State:
        if not self.keep_unreceived:
            return {}
        return {SYNCED: torch.zeros(len(clients), dtype=torch.uint8, device="cpu")}

    def private_form(self, segments_every: int = 0):
        """Every tensor masked (zeros where not sent), with per-tensor weights."""
        from ..privacy.forms import PartialForm

        self.check_private_form(segments_every)
        return PartialForm(self)

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        state = super().init_state(num_features, num_classes, seed)
        if self.keep_unreceived:
            state[FRESH] = torch.ones(len(candidate_names(state)), dtype=torch.uint8, device="cpu")
        return state

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        model = {n: state[n] for n in self._model_names(state)}
        if not self.keep_unreceived:
            return model
        synced = state.get(SYNCED)
        if synced is None or not 0 <= client_id < synced.numel() or not bool(synced[client_id]):
            return model  # a client's first download: the whole model
        fresh = state[FRESH].bool().tolist()
        return {n: model[n] for n, f in zip(candidate_names(model), fresh, strict=True) if f}

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        # Any subset of the model's tensors, each with its exact dtype and shape.
        return PayloadSpec(required={}, optional=state_spec(state, self._model_names(state)))

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        new = {k: v.clone() for k, v in state.items()}
        model = {n: new[n] for n in self._model_names(new)}
        apply_partial_payloads(model, [({"tensors": r.payload}, float(r.num_examples)) for r in results])
        if self.keep_unreceived:
            sent = {n for r in results for n in r.payload}
            fresh = [n in sent for n in candidate_names(model)]
            new[FRESH] = torch.tensor(fresh, dtype=torch.uint8, device=state[FRESH].device)
            if SYNCED in new:
                for r in results:
                    if 0 <= r.client_id < new[SYNCED].numel():
                        new[SYNCED][r.client_id] = 1
        return new

    # ---- client side

    def client_view(self, payload: Payload, memory: Payload | None) -> Payload:
        """The client's model after receiving ``payload``: its kept tensors with the received ones over them."""
        if memory is None:
            return payload
        unknown = sorted(set(payload) - set(memory))
        if unknown:
            raise PayloadError(f"download holds tensors the model does not have: {unknown[:3]}")
        return {**memory, **payload}

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        return self._train(payload, data, config, seed)[0]

    def client_update_stateful(
        self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int, memory: Payload | None
    ) -> tuple[Payload, Payload | None]:
        """Train from the client's view of ``payload``; upload the selected tensors, keep the whole model."""
        view = self.client_view(payload, memory)
        if memory is None:  # a first download must hold the whole model
            try:
                names = {n for n, _ in self._skeleton(view).named_parameters()}
            except KeyError as e:
                raise PayloadError(f"a client's first download must hold the whole model; missing {e}") from None
            if names != set(view):
                raise PayloadError("a client's first download must hold exactly the model's tensors")
        return self._train(view, data, config, seed)

    def _train(self, payload: Payload, data: ClientData, config: TrainConfig, seed: int) -> tuple[Payload, Payload]:
        model = self._model(payload)
        train_local(
            list(model.parameters()),
            lambda b: multilabel_loss(model(b.x), b, self.loss),
            data,
            config,
            generator(seed, "shuffle"),
        )
        trained = state_of(model)
        return self._select(payload, trained), trained

    def local_problem(
        self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int
    ) -> LocalProblem | None:
        model = self._skeleton(payload)
        params = {n: payload[n] for n, _ in model.named_parameters()}
        return multilabel_problem(model, params, data, self.loss, seed, lambda p: self._select(payload, p))
