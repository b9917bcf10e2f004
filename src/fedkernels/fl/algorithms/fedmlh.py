"""FedMLH (federated multi-label hashing): R sub-models, each a classifier over B hashed buckets
of the p labels, trained on ``label_hash`` targets and averaged on the server (every parameter at
once: the tables' slices are independent, so one weighted average is the per-table average);
prediction merges the R bucket scores per class and takes the top k with ``bucket_merge_topk``,
never building ``[N, p]``. With ``R * B < p`` every round moves fewer bytes than FedAvg.

Built on ``fedkernels.nn.FedMLHHead`` (every parameter has a leading dimension R). The server
broadcasts the hash family and the label count as four integers ``(R, B, seed, p)`` inside the
payload, so a client (Flower too) rebuilds the same hashes without any shared table.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence

import torch

from ...nn.fedmlh import FedMLHHead, default_hash_size
from ..aggregate import weighted_average
from ..local import train_local
from ..payload import Payload, PayloadSpec, state_spec
from ..seeding import derive_seed, generator
from ..strategy import State, Strategy
from ..types import ClientData, ClientResult, TrainConfig

HASH_KEY = "fedmlh.hash"  # int64 [4]: num_tables, num_buckets, hash seed, num_classes


class FedMLH(Strategy):
    """FedMLH with R hashed sub-models.

    Args:
        num_tables: R sub-models (hash tables); ``None`` picks R from p (:func:`default_hash_size`).
        num_buckets: B buckets per table; ``None`` picks B from p and R (:func:`default_hash_size`).
        hidden: hidden layer widths of each sub-model.

    ``R * B >= p`` saves nothing over FedAvg's p outputs: ``init_state`` then warns (``UserWarning``,
    naming both options); ``fedkernels run`` refuses it.
    """

    dp_sgd_training = True  # its client_update trains with train_local (DP-SGD applies)

    name = "FedMLH"
    # the head per (F, hidden, hash family), a memo of a pure function of its key (the table is costly)
    config_caches = ("_templates",)

    def __init__(
        self, num_tables: int | None = None, num_buckets: int | None = None, hidden: Sequence[int] = (256,)
    ) -> None:
        if num_tables is not None and int(num_tables) < 1:
            raise ValueError(f"num_tables must be >= 1, got {num_tables}")
        if num_buckets is not None and int(num_buckets) < 2:
            raise ValueError(f"num_buckets must be >= 2, got {num_buckets}")
        self.num_tables = None if num_tables is None else int(num_tables)
        self.num_buckets = None if num_buckets is None else int(num_buckets)
        self.hidden = tuple(int(h) for h in hidden)
        # One head per (F, hash family), built (and its p x R table hashed) once; _load copies it.
        self._templates: dict[tuple, FedMLHHead] = {}

    def hash_size(self, num_classes: int) -> tuple[int, int]:
        """The ``(R, B)`` this strategy uses for ``num_classes`` labels (the options, else from p)."""
        r, b = default_hash_size(num_classes, self.num_tables)
        return r, self.num_buckets if self.num_buckets is not None else b

    def _build(self, hash_params: torch.Tensor, num_features: int) -> FedMLHHead:
        """The head for broadcast ``(R, B, seed, p)`` over ``num_features`` inputs. The head
        initialises from torch's global RNG, so that is seeded (and restored after) from the hash
        seed, which derives from the run's seed."""
        r, b, hash_seed, num_classes = (int(v) for v in hash_params)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(hash_seed)
            return FedMLHHead(num_features, num_classes, r, b, hidden=self.hidden, seed=hash_seed, device="cpu")

    def _template(self, hash_params: torch.Tensor, num_features: int, device: torch.device | None = None) -> FedMLHHead:
        """The head of this hash family on ``device`` (default: the host), built once per device (the
        hash table is the costly part; the host build is seeded, so every device's copy is equal)."""
        device = torch.device("cpu") if device is None else torch.device(device)
        key = (int(num_features), self.hidden, tuple(int(v) for v in hash_params), str(device))
        head = self._templates.get(key)
        if head is None:  # two threads may both build it: the same head, one is kept
            if device.type == "cpu":
                built = self._build(hash_params, num_features)
            else:
                built = copy.deepcopy(self._template(hash_params, num_features)).to(device)
            head = self._templates.setdefault(key, built)
        return head

    def _load(self, payload: Payload) -> FedMLHHead:
        """A fresh head holding ``payload``'s weights. Its parameters are its own (clients may train
        in parallel threads); its hash table is the template's, shared read-only."""
        # F: the first layer's weights are [R, F, h]; the dims live in the payload, not on self
        weights = payload["weights.0"]
        template = self._template(payload[HASH_KEY], weights.shape[1], weights.device)
        head = copy.deepcopy(template, memo={id(template.table): template.table})
        params = dict(head.named_parameters())
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(payload[name])
        return head

    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        r, b = self.hash_size(num_classes)
        if r * b >= num_classes:
            warnings.warn(
                f"FedMLH: num_tables * num_buckets = {r} * {b} = {r * b} >= p = {num_classes} classes: the "
                "hashed model is no smaller than FedAvg's; lower num_buckets or num_tables",
                UserWarning,
                stacklevel=2,
            )
        hash_params = torch.tensor(
            [r, b, derive_seed(seed, "fedmlh-hash"), num_classes], dtype=torch.int64, device="cpu"
        )
        head = self._template(hash_params, num_features)
        state = {name: p.detach().clone() for name, p in head.named_parameters()}
        state[HASH_KEY] = hash_params
        return state

    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        return dict(state)

    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        head = self._load(payload)
        train_local(
            list(head.parameters()),
            lambda b: head.loss(b.x, b.indptr, b.indices),
            data,
            config,
            generator(seed, "shuffle"),
        )
        return {name: p.detach().clone() for name, p in head.named_parameters()}

    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        return PayloadSpec(state_spec(state, [k for k in state if k != HASH_KEY]))

    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        new = weighted_average([r.payload for r in results], [float(r.num_examples) for r in results])
        new[HASH_KEY] = state[HASH_KEY]
        return new

    @torch.no_grad()
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        return self._load(state).predict_topk(x, k)[1]

    def model_bytes(self, state: State) -> int:
        return sum(t.numel() * t.element_size() for name, t in state.items() if name != HASH_KEY)
