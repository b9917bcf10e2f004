"""One Strategy per algorithm."""

from .fedavg import FedAvg
from .fedmlh import FedMLH

__all__ = ["FedAvg", "FedMLH"]
