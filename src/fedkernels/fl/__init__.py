"""The thin federated loop: Server, Strategy, payloads, and the algorithms (docs/design.md §4)."""

from .algorithms import (
    FedALC,
    FedALCFixed,
    FedAvg,
    FedAvgFixed,
    FedAvgPositive,
    FedAwS,
    FedMLH,
    FedSS,
    FullSoftmax,
    L1Diff,
    L1DiffNetwork,
    LabelPrior,
    NegOnly,
    PartialExchange,
    PosOnly,
    PosOnlySpread,
)
from .payload import PayloadError, PayloadSpec, TensorSpec, decode, encode
from .server import RunConfig, Server
from .strategy import State, Strategy
from .types import ClientData, ClientResult, RoundRecord, TrainConfig

__all__ = [
    "ClientData",
    "ClientResult",
    "FedALC",
    "FedALCFixed",
    "FedAvg",
    "FedAvgFixed",
    "FedAvgPositive",
    "FedAwS",
    "FedMLH",
    "FedSS",
    "FullSoftmax",
    "L1Diff",
    "L1DiffNetwork",
    "LabelPrior",
    "NegOnly",
    "PartialExchange",
    "PayloadError",
    "PayloadSpec",
    "PosOnly",
    "PosOnlySpread",
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
