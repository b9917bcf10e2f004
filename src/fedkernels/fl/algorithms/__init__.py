"""One Strategy per algorithm."""

from .fedavg import FedAvg
from .fedmlh import FedMLH
from .partial import PartialExchange

__all__ = ["FedAvg", "FedMLH", "PartialExchange"]
