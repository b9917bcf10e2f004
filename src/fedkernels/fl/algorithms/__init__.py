"""One Strategy per algorithm."""

from .fedavg import FedAvg
from .fedaws import FedALC, FedALCFixed, FedAwS

__all__ = ["FedALC", "FedALCFixed", "FedAvg", "FedAwS"]
