"""Plain data records of the federated loop."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..data.types import ClientData  # the data layer owns it; re-exported as fedkernels.fl.ClientData

__all__ = ["ClientData", "ClientResult", "RoundRecord", "TrainConfig"]


@dataclass
class TrainConfig:
    """Local training: E epochs of minibatch SGD (or Adam) at a learning rate, optionally DP-SGD;
    ``autocast="bf16"`` runs the forward pass under bfloat16 autocast (:func:`fedkernels.fl.local.autocast`)."""

    epochs: int = 1
    batch_size: int = 64
    lr: float = 0.1
    optimizer: str = "sgd"  # "sgd" | "adam"
    weight_decay: float = 0.0
    autocast: str = "off"  # "off" | "bf16"
    # sample-level DP-SGD (fedkernels.fl.dpsgd): per-example L2 clip and noise multiplier; None: plain training
    dp_sample_clip: float | None = None
    dp_sample_noise: float = 0.0
    # DP-SGD's batches and noise from the client's seeded generator (a reproducible simulation); False:
    # from the device's OS randomness, which nobody else knows (the private choice)
    dp_sample_seeded: bool = False


@dataclass
class ClientResult:
    """What the server receives from one client in one round (the payload already decoded and checked)."""

    client_id: int
    payload: dict[str, torch.Tensor]
    num_examples: int
    bytes_up: int


@dataclass
class RoundRecord:
    """One round's accounting and evaluation. ``skipped`` says why the update was skipped (e.g. every
    successful client held 0 examples), empty when it was applied or no client succeeded. ``privacy``
    is filled by private rounds only."""

    round: int
    clients: list[int]
    failed: list[tuple[int, str]]
    bytes_down: int
    bytes_up: int
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    skipped: str = ""
    # what the round released and the privacy accounted so far (fedkernels.fl.privacy.accounting): the
    # mechanism's parameters, epsilon per observer; private rounds also survivors and SecAgg+ bytes
    privacy: dict[str, float] = field(default_factory=dict)
    # private rounds: clients whose contribution is in the sums although a later SecAgg+ message of
    # theirs was refused (client, what), e.g. a share that fails its commitment at the unmask stage
    faults: list[tuple[int, str]] = field(default_factory=list)
    # the clients whose trained update reached the server (in the clear or masked into a sum), ascending:
    # the rounds DP accounting counts for each client, whatever happened to the update afterwards
    contributed: list[int] = field(default_factory=list)
