"""One Strategy per algorithm; every name in ``__all__`` is available to ``fedkernels run`` (see fl/registry.py)."""

from .fedavg import FedAvg
from .fedaws import FedALC, FedALCFixed, FedAvgFixed, FedAvgPositive, FedAwS
from .fedmlh import FedMLH
from .fedss import FedSS, FullSoftmax, NegOnly, PosOnly, PosOnlySpread
from .l1diff import L1Diff
from .l1diff_network import L1DiffNetwork
from .partial import PartialExchange
from .prior import LabelPrior

__all__ = [
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
    "PosOnly",
    "PosOnlySpread",
]
