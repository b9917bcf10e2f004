"""One Strategy per algorithm; every name in ``__all__`` is available to ``fedkernels run`` (see fl/registry.py)."""

from .fedavg import FedAvg
from .fedmlh import FedMLH
from .fedss import FedSS, FullSoftmax, NegOnly, PosOnly
from .partial import PartialExchange
from .l1diff import L1Diff
from .l1diff_network import L1DiffNetwork
from .fedaws import FedALC, FedALCFixed, FedAwS

__all__ = ["FedAvg", "FedMLH", "FedSS", "FullSoftmax", "NegOnly", "PosOnly", "PartialExchange", "L1Diff", "L1DiffNetwork", "FedALC", "FedALCFixed", "FedAwS"]
