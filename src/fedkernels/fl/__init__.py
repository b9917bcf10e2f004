"""The thin federated loop: Server, Strategy, payloads, and the algorithms (docs/design.md §4)."""

from .algorithms import FedAvg, FedMLH
from .payload import PayloadError, PayloadSpec, TensorSpec, decode, encode
from .server import RunConfig, Server
from .strategy import State, Strategy
from .types import ClientData, ClientResult, RoundRecord, TrainConfig

__all__ = [
    "ClientData",
    "ClientResult",
    "FedAvg",
    "FedMLH",
    "PayloadError",
    "PayloadSpec",
    "RoundRecord",
    "RunConfig",
    "Server",
    "State",
    "Strategy",
    "TensorSpec",
    "TrainConfig",
    "decode",
    "encode",
]
