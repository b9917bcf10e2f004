"""The personalised (network) l1-difference variant.

Client n's model is ``x^(n) = M x + N z^(n)``: the shared layers ``x`` (every layer but the last)
and a personal head ``z^(n)`` (the last layer), coupled across clients over a kNN similarity graph
by ``lam * sum_{(i,j) in E} ||z^(i) - z^(j)||_p``. A round: each selected client gets ``x`` and its
``z^(n)``, computes its gradient, and sends the l1-difference directions of both parts through the
codec. The server steps the shared part by the weighted mean of the directions, steps each
participant's head by its own direction, then applies the prox of the graph penalty (step ``eta``)
to all heads with :func:`fedkernels.graph_prox` (a duality-gap-certified solve).

The graph comes from the clients' feature covariances at setup (``graph="features"``), from a
Gaussian kernel on their mean feature vectors at setup (``graph="kernel"``: kNN edges weighted by the
kernel, :func:`fedkernels.solvers.kernel_graph`), or from the current heads each round
(``graph="models"``, cosine kNN in model space). ``p`` is 1, 2 or ``inf`` (the norm on head differences).
Each client is evaluated with its own model (``predict_topk_client``; ``Server.evaluate_clients``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ...comm import max_stream_bytes
from ...solvers import feature_space_graph, graph_prox, kernel_graph, model_space_graph
from ..models import load_state, mlp, model_topk_ids, state_of
from ..payload import Payload, PayloadSpec, TensorSpec
from ..strategy import SERVER, State, Strategy
from ..types import ClientData, ClientResult, TrainConfig
from .fedavg import multilabel_loss
from .l1diff import GAMMA, GAMMA_SENT, l1diff_model_names, received_gamma
from .l1diff_codec import check_streams, encode_direction, full_gradient, l1diff_direction

PERSONAL = "personal."
EDGES = SERVER + "edges"  # int64 [E, 2]: the kNN graph from setup (graph="features" or "kernel")
EDGE_WEIGHTS = SERVER + "edge_weights"  # float64 [E]: graph="kernel"'s kernel weights
GAP = SERVER + "gap"  # float64 []: the duality gap of the last graph prox (-1 before the first: not NaN,
# which would make equal states compare unequal)


class L1DiffNetwork(Strategy):
    """Personalised l1-difference update with graph-coupled heads.

    Args:
        num_clients: how many clients there are (the state holds one head each).
        gamma: the l1-difference weight (as :class:`L1Diff`).
        eta: the proximal step size (as :class:`L1Diff`).
        lam: weight of the graph penalty.
        p: 1, 2 or ``float("inf")`` (also ``"inf"``), the graph penalty's norm.
        k: neighbours per client in the kNN graph.
        graph: ``"features"``, ``"kernel"`` or ``"models"``, what the kNN graph is built from.
        hidden: hidden widths (at least one layer, so a shared part exists).
        loss: as :class:`L1Diff`.
        value_dtype: as :class:`L1Diff`.
        levels: as :class:`L1Diff`.
        tol: duality-gap tolerance of the graph prox.
        gamma_rel: if set, gamma is this multiple of the run's mean |g0|, set from round 0's exact
            gradients (as :class:`L1Diff`'s ``gamma_rel``); ``gamma`` is then ignored.
    """

    name = "L1DiffNetwork"

    def __init__(
        self,
        num_clients: int,
        gamma: float = 0.0,
        eta: float = 0.5,
        lam: float = 0.1,
        p: float | str = 2,
        k: int = 2,
        graph: str = "features",
        hidden: Sequence[int] = (32,),
        loss: str = "bce",
        value_dtype: str = "float32",
        levels: int | None = None,
        tol: float = 1e-6,
        gamma_rel: float | None = None,
    ) -> None:
        if gamma_rel is not None and not gamma_rel >= 0:
            raise ValueError(f"gamma_rel must be >= 0, got {gamma_rel}")
        self.gamma_rel = None if gamma_rel is None else float(gamma_rel)
        if num_clients < 2 or not 0 < k < num_clients:
            raise ValueError(f"num_clients must be >= 2 and k in [1, num_clients), got {num_clients}, {k}")
        if p not in (1, 2, "inf", float("inf")) or isinstance(p, bool):
            raise ValueError(f"p must be 1, 2 or 'inf', got {p!r}")
        p = float(p)
        if not gamma >= 0 or not eta > 0 or not lam >= 0:
            raise ValueError(f"need gamma >= 0, eta > 0, lam >= 0; got {gamma}, {eta}, {lam}")
        if graph not in ("features", "kernel", "models") or not hidden:
            raise ValueError("graph must be 'features', 'kernel' or 'models', and hidden must name at least one layer")
        if value_dtype not in ("float32", "float16"):
            raise ValueError(f"value_dtype must be 'float32' or 'float16', got {value_dtype!r}")
        self.num_clients, self.gamma, self.eta, self.lam, self.p, self.k = num_clients, gamma, eta, lam, p, k
        self.graph, self.hidden, self.loss = graph, tuple(hidden), loss
        self.value_dtype, self.levels, self.tol = value_dtype, levels, tol

    def private_form(self, segments_every: int = 0):
        """None: refused with the reason."""
        raise ValueError(
            "L1DiffNetwork keeps every client's personal head on the server and steps it with that client's "
            "own direction (its graph prox couples all heads), so secure aggregation cannot hide them and "
            "client-level DP does not apply; run it without --secagg/--dp-*"
        )

    def options(self) -> dict:
        """The base options, with ``p = inf`` written as ``"inf"`` (JSON has no infinity)."""
        out = super().options()
        out["p"] = "inf" if self.p == float("inf") else self.p
        return out

    # ---- model layout: shared layers + the personal last layer
    def _head_names(self) -> list[str]:
        last = 2 * len(self.hidden)  # index of the last Linear in the Sequential
        return [f"{last}.weight", f"{last}.bias"]

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        full = state_of(mlp(num_features, num_classes, self.hidden, seed))
        state = {n: t for n, t in full.items() if n not in self._head_names()}
        for n in self._head_names():  # every client starts from the same head
            state[PERSONAL + n] = full[n].unsqueeze(0).repeat(self.num_clients, *([1] * full[n].dim()))
        state[GAP] = torch.tensor(-1.0, dtype=torch.float64, device="cpu")
        if self.gamma_rel is not None:
            state[GAMMA] = torch.tensor(-1.0, dtype=torch.float64, device="cpu")
        return state

    @staticmethod
    def _model_names(state: Payload) -> list[str]:
        return l1diff_model_names(state)

    def setup(self, clients: Sequence[ClientData], seed: int) -> State:
        if len(clients) != self.num_clients:
            raise ValueError(f"num_clients is {self.num_clients} but {len(clients)} clients were given")
        if self.graph == "features":
            if any(c.x.layout == torch.sparse_csr for c in clients):
                raise TypeError("clients: graph='features' compares dense feature rows; pass dense features")
            edges, _ = feature_space_graph([c.x for c in clients], self.k)
            return {EDGES: edges}
        if self.graph == "kernel":
            edges, weights = kernel_graph([c.x for c in clients], self.k)
            return {EDGES: edges, EDGE_WEIGHTS: weights}
        return {}

    def _client_model(self, shared: Payload, head: dict[str, torch.Tensor]) -> torch.nn.Module:
        # the dims are the tensors': first layer [h, F], head [C, h] (no per-run state on self)
        num_features, num_classes = shared["0.weight"].shape[1], head[self._head_names()[0]].shape[0]
        return load_state(mlp(num_features, num_classes, self.hidden), {**shared, **head})

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        out = {n: state[n] for n in self._model_names(state) if not n.startswith(PERSONAL)}
        out.update({PERSONAL + n: state[PERSONAL + n][client_id].clone() for n in self._head_names()})
        gamma = max(0.0, float(state[GAMMA])) if GAMMA in state else self.gamma
        out[GAMMA_SENT] = torch.tensor([gamma], dtype=torch.float64, device=state[GAP].device)
        return out

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        gamma = received_gamma(payload, self.gamma)
        shared = {n: t for n, t in payload.items() if not n.startswith(PERSONAL) and n != GAMMA_SENT}
        head = {n: payload[PERSONAL + n] for n in self._head_names()}
        model = self._client_model(shared, head)
        named = list(model.named_parameters())
        grads = full_gradient(
            [p for _, p in named], lambda b: multilabel_loss(model(b.x), b, self.loss), data, config.batch_size
        )
        out = {}
        for (n, _), g in zip(named, grads, strict=True):
            key = PERSONAL + n if n in self._head_names() else n
            out[key] = encode_direction(l1diff_direction(g, gamma, self.eta), self.value_dtype, self.levels)
        return out

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        shapes = self._direction_shapes(state)  # each stream at most the longest valid one of its tensor
        return PayloadSpec(
            {
                n: TensorSpec(torch.uint8, (None,), max_numel=max_stream_bytes(shapes[n], self.value_dtype))
                for n in payload_sent
                if n != GAMMA_SENT
            }
        )

    def _direction_shapes(self, state: State) -> dict[str, torch.Size]:
        """Shape of each uploaded direction: a personal head's is one client's row of its stack."""
        return {n: (state[n].shape[1:] if n.startswith(PERSONAL) else state[n].shape) for n in self._model_names(state)}

    def check_upload(
        self, state: State, payload_sent: Payload, upload: Payload, request: Payload | None = None
    ) -> Payload:
        """Decode every stream (PayloadError if one is corrupt): aggregate gets float32 directions."""
        return check_streams(upload, self._direction_shapes(state), self.value_dtype)

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        decoded, kept = [r.payload for r in results], results  # check_upload's decoded directions
        new = {n: t.clone() for n, t in state.items()}
        if not decoded:
            return new
        total = float(sum(r.num_examples for r in kept))
        abs_sum, count = 0.0, 0
        for n in self._model_names(state):
            shape = state[n].shape[1:] if n.startswith(PERSONAL) else state[n].shape
            step = torch.zeros(shape, device=state[n].device)
            for d, r in zip(decoded, kept, strict=True):
                step.add_(d[n], alpha=r.num_examples / total)
            abs_sum, count = abs_sum + float(step.double().abs().sum()), count + step.numel()
            if n.startswith(PERSONAL):
                for d, r in zip(decoded, kept, strict=True):  # each participant steps its own head
                    new[n][r.client_id] -= self.eta * d[n]
            else:
                new[n] -= self.eta * step.to(state[n].dtype)
        if GAMMA in state and float(state[GAMMA]) < 0 and self.gamma_rel is not None:  # round 0 sets gamma
            gamma = self.gamma_rel * abs_sum / max(1, count)
            new[GAMMA] = torch.tensor(gamma, dtype=torch.float64, device=state[GAMMA].device)
        return self._couple_heads(new)

    def _couple_heads(self, state: State) -> State:
        """Prox of ``eta * lam * sum_E ||z_i - z_j||_p`` over all heads, flattened side by side."""
        names = [PERSONAL + n for n in self._head_names()]
        y = torch.cat([state[n].reshape(self.num_clients, -1) for n in names], 1).double()
        edges = state.get(EDGES)
        if self.graph == "models" or edges is None:
            edges, _ = model_space_graph(y, self.k, "cosine")
        weights = state.get(EDGE_WEIGHTS) if self.graph == "kernel" else None
        res = graph_prox(y, edges, self.eta * self.lam, self.p, weights=weights, tol=self.tol)
        state[GAP] = torch.tensor(res.gap, dtype=torch.float64, device=state[GAP].device)
        at = 0
        for n in names:
            width = state[n][0].numel()
            state[n] = res.z[:, at : at + width].reshape(state[n].shape).to(state[n].dtype)
            at += width
        return state

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        """Global evaluation with the mean head (personal evaluation: :meth:`predict_topk_client`)."""
        shared = {n: state[n] for n in self._model_names(state) if not n.startswith(PERSONAL)}
        head = {n: state[PERSONAL + n].mean(0) for n in self._head_names()}
        return model_topk_ids(self._client_model(shared, head), x, k)  # fused last layer

    @torch.no_grad()
    def predict_topk_client(self, state: State, client_id: int, x: torch.Tensor, k: int) -> torch.Tensor:
        """Top-k under client ``client_id``'s personalised model."""
        shared = {n: state[n] for n in self._model_names(state) if not n.startswith(PERSONAL)}
        head = {n: state[PERSONAL + n][client_id] for n in self._head_names()}
        return model_topk_ids(self._client_model(shared, head), x, k)

    def model_bytes(self, state: State) -> int:
        """The model's tensors (the server-only graph and gap left out)."""
        return sum(state[n].numel() * state[n].element_size() for n in self._model_names(state))
