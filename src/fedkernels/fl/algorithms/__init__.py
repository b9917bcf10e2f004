"""One Strategy per algorithm."""

from .fedavg import FedAvg
from .l1diff import L1Diff
from .l1diff_network import L1DiffNetwork

__all__ = ["FedAvg", "L1Diff", "L1DiffNetwork"]
