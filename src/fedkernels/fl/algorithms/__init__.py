"""One Strategy per algorithm."""

from .fedavg import FedAvg
from .partial import PartialExchange

__all__ = ["FedAvg", "PartialExchange"]
