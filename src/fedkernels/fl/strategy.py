"""The Strategy interface: one subclass per algorithm (docs/design.md §4).

A round is: the server picks clients, each may send a ``client_request``, ``client_payload``
builds each one's download, the client runs ``client_update`` on its own data (a pure function of
the payload, its data and a seed, so Flower clients can run it across machines), the server checks
each upload with ``upload_spec`` (and ``check_upload`` for content the spec cannot see, which
returns the checked upload) and folds them in with ``aggregate``; :mod:`fedkernels.fl.round` runs
these steps for both transports (in-process and Flower). Payloads are dicts of tensors, serialised
with safetensors by the loop, which counts the real bytes both ways.
"""

from __future__ import annotations

import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .payload import Payload, PayloadSpec
from .types import ClientData, ClientResult, TrainConfig

if TYPE_CHECKING:
    from .batched import LocalProblem

State = dict[str, torch.Tensor]

# Prefix of the state entries that stay on the server (e.g. FedALC's pair weights, a client graph):
# checkpointed like the rest, never in a download (a strategy's client_payload leaves them out, and
# the federated-evaluation download drops them).
SERVER = "server."


class Strategy(ABC):
    """Base class of the federated algorithms. Subclasses hold only configuration; all global
    state lives in the ``State`` dict the server passes around (so it can be checkpointed), and
    what a run learns at setup (e.g. FedALC's pair weights, a client graph) is returned as state
    entries by :meth:`setup` / :meth:`setup_from_reports`. The one exception: memos of pure
    functions of the configuration (and their arguments), named in ``config_caches``, which never
    change a result (python_tests/fl/test_stateless.py checks everything else is untouched by a run)."""

    name: str = "strategy"
    config_caches: tuple[str, ...] = ()
    # Whether this class's client_update trains through fedkernels.fl.local.train_local, so DP-SGD
    # (TrainConfig.dp_sample_clip) clips and noises every example. Read by trains_with_dp_sgd on the class
    # that defines client_update only: a subclass that replaces client_update must declare its own.
    dp_sgd_training: bool = False

    @property
    def stateful_clients(self) -> bool:
        """Whether a client keeps tensors from one round to the next (e.g. partial exchange with the
        authors' semantics: a client keeps the tensors the server did not send). Such a client runs
        :meth:`client_update_stateful`; the in-process loop keeps its memory (checkpoints do not, and
        the Flower adapter refuses such a strategy). Default: False."""
        return False

    def private_form(self, segments_every: int = 0):  # -> fedkernels.fl.privacy.forms.DenseForm
        """This strategy's round written as sums, for secure aggregation and client-level DP
        (:mod:`fedkernels.fl.privacy.forms`; needs the extra ``fedkernels[privacy]``). Default: the
        whole-model average (:class:`~fedkernels.fl.privacy.forms.DenseForm`); a strategy whose upload is
        not its trained state overrides it, or raises ``ValueError`` saying why it has none.

        Args:
            segments_every: L1Diff's public-segment period (any other strategy refuses a nonzero one).
        """
        from .privacy.forms import DenseForm

        self.check_private_form(segments_every)
        return DenseForm(self)

    def check_private_form(self, segments_every: int = 0) -> None:
        """The refusals every private form starts with: stateful clients, and segments for a strategy
        that has none. Raises ValueError saying why."""
        if self.stateful_clients:
            raise ValueError(
                f"{self.name} has stateful clients (they keep tensors between rounds), which private rounds do "
                "not carry; run it without --secagg/--dp-* (or, for PartialExchange, keep_unreceived=False)"
            )
        if segments_every and self.private_segments is False:
            raise ValueError(f"segments_every applies to L1Diff only, not {self.name}")

    private_segments = False  # whether private_form takes segments_every (L1Diff's public segments)

    def client_view(self, payload: Payload, memory: Payload | None) -> Payload:
        """Client side, stateful clients: the model the client holds after receiving ``payload``, given
        what it kept (``None`` before its first round). Default: the payload."""
        return payload

    def client_update_stateful(
        self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int, memory: Payload | None
    ) -> tuple[Payload, Payload | None]:
        """Client side, stateful clients: :meth:`client_update` from the client's view of ``payload``;
        returns the upload and what the client keeps. Default: ``client_update``, nothing kept."""
        return self.client_update(self.client_view(payload, memory), data, config, round, seed), None

    @abstractmethod
    def init_state(self, num_features: int, num_classes: int, seed: int) -> State:
        """The initial global state (model parameters and any server-side buffers)."""

    def setup(self, clients: Sequence[ClientData], seed: int) -> State:
        """One-off preparation before round 0 that needs the clients' data in the server's hands
        (in-process only: a Flower server never has it). Prefer the setup exchange below, which
        both transports run. Returns state entries to add to the run's state (so they are
        checkpointed). Default: none."""
        return {}

    def setup_needs_client_data(self) -> bool:
        """Whether :meth:`setup` reads the clients' data (a Flower server has none, so it refuses such a
        strategy). Default: whenever a subclass overrides :meth:`setup`."""
        return type(self).setup is not Strategy.setup

    def setup_report(self, data: ClientData) -> Payload | None:
        """Client side, once before round 0: what this client sends for :meth:`setup_from_reports`
        (e.g. FedALC's keyed label digests). Default: None, no setup exchange."""
        return None

    def setup_report_spec(self, state: State) -> PayloadSpec | None:
        """What a well-formed setup report looks like for the run of ``state`` (required when
        ``setup_report`` gives one)."""
        return None

    def check_setup_report(self, report: Payload) -> Payload:
        """Content checks of a setup report beyond its spec; returns the checked report. Raise
        :class:`~fedkernels.fl.payload.PayloadError` to leave this client's report out."""
        return report

    def setup_from_reports(self, state: State, reports: list[Payload], seed: int) -> State:
        """Server side: one-off preparation from the clients' checked setup reports (ascending
        client id) for the run of ``state``. Returns state entries to add to the run's state (the
        round protocol records the reports' bytes). Default: none."""
        return {}

    def client_request(self, data: ClientData, round: int, seed: int) -> Payload | None:
        """Client side, before the download: what the client asks the server for (e.g. FedSS's
        sampled class ids). Counted as upload bytes. Default: no request."""
        return None

    def request_spec(self, state: State) -> PayloadSpec | None:
        """What a well-formed request looks like (required when ``client_request`` returns one)."""
        return None

    @abstractmethod
    def client_payload(self, state: State, client_id: int, request: Payload | None, round: int, seed: int) -> Payload:
        """What the server sends client ``client_id`` this round, given its checked request."""

    @abstractmethod
    def client_update(self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int) -> Payload:
        """Client side: train locally from the downloaded payload, return the upload."""

    def local_problem(
        self, payload: Payload, data: ClientData, config: TrainConfig, round: int, seed: int
    ) -> LocalProblem | None:
        """Client side, optional: :meth:`client_update`'s local training written as a
        :class:`~fedkernels.fl.batched.LocalProblem`, so the in-process loop can train a round's
        clients in one batched pass (:func:`fedkernels.fl.batched.train_batched`). Its upload must be
        :meth:`client_update`'s up to floating-point rounding (python_tests/fl/test_batched.py checks
        every strategy that gives one). Default: ``None``, the sequential loop."""
        return None

    @abstractmethod
    def upload_spec(self, state: State, payload_sent: Payload) -> PayloadSpec:
        """What a well-formed upload in answer to ``payload_sent`` looks like."""

    def check_upload(
        self, state: State, payload_sent: Payload, upload: Payload, request: Payload | None = None
    ) -> Payload:
        """Content checks an upload needs beyond its spec (which only sees names, dtypes, shapes,
        finiteness and id ranges), e.g. a codec stream that must decode; returns the checked upload
        that :meth:`aggregate` receives (e.g. the decoded tensors, or the upload with the class row
        the client's checked ``request`` asked for). Raise
        :class:`~fedkernels.fl.payload.PayloadError` to reject this client's upload; the round
        protocol then records it in ``RoundRecord.failed`` like any other rejection. Default: the
        upload as it is."""
        return upload

    @abstractmethod
    def aggregate(self, state: State, results: list[ClientResult], round: int) -> State:
        """Fold the checked uploads (what :meth:`check_upload` returned) into a new global state
        (must not modify ``state`` in place)."""

    @abstractmethod
    def predict_topk(self, state: State, x: torch.Tensor, k: int) -> torch.Tensor:
        """Top-k class ids ``[N, k]`` for features ``x [N, F]`` under the global model."""

    def predict_topk_client(self, state: State, client_id: int, x: torch.Tensor, k: int) -> torch.Tensor | None:
        """Top-k class ids ``[N, k]`` for features ``x [N, F]`` under client ``client_id``'s personalised
        model (e.g. L1DiffNetwork's per-client heads), which per-client evaluation ranks a client's own
        rows with. Default: ``None``, no personalised model (the global model's :meth:`predict_topk`
        serves)."""
        return None

    def embed(self, state: State, x: torch.Tensor) -> torch.Tensor | None:
        """The representation ``[N, d]`` of features ``x [N, F]`` under the global model, for retrieval
        metrics (MAP@R). Default: ``None``, the strategy has no embedding to retrieve with."""
        return None

    def diagnostics(self, state: State) -> dict[str, float]:
        """Named numbers about ``state`` that a run's result reports beside its metrics (e.g. how far
        FedALC's pair weights move it from FedAwS). Default: none."""
        return {}

    def hash_size(self, num_classes: int) -> tuple[int, int] | None:
        """The ``(R, B)`` of the hashed output layer this strategy builds for ``num_classes`` labels
        (FedMLH), which a run checks against the data (``R * B`` must stay below ``num_classes``).
        Default: ``None``, no hashed output layer."""
        return None

    def options(self) -> dict:
        """The strategy's configuration as JSON values: every ``__init__`` argument (of any class in
        the MRO) that the instance keeps under the same public name. A checkpoint's run identity holds
        it, so resuming with other options is refused. Override to add (never a secret)."""
        out: dict = {}
        for cls in type(self).__mro__:
            init = cls.__dict__.get("__init__")
            if init is None:
                continue
            for name, param in inspect.signature(init).parameters.items():
                if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name == "self" or name in out:
                    continue
                value = getattr(self, name, None) if not name.startswith("_") else None
                if value is not None and _json_value(value) is not None:
                    out[name] = _json_value(value)
        return dict(sorted(out.items()))

    def model_bytes(self, state: State) -> int:
        """Bytes of the model a client holds (for the model-size column)."""
        return sum(t.numel() * t.element_size() for t in state.values())


def _json_value(value: object) -> object | None:
    """``value`` as it reads back from JSON (tuples become lists), or None if JSON cannot hold it."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return None


def trains_with_dp_sgd(strategy: Strategy) -> bool:
    """Whether ``strategy``'s local training runs DP-SGD when asked: ``dp_sgd_training`` as declared by
    the class that defines its ``client_update`` (and ``client_update_stateful``, for stateful clients)."""
    names = ["client_update"] + (["client_update_stateful"] if strategy.stateful_clients else [])
    for name in names:
        owner = next(k for k in type(strategy).__mro__ if name in vars(k))
        if owner is not Strategy and not vars(owner).get("dp_sgd_training", False):
            return False
    return True
