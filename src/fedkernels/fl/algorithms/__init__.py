"""One Strategy per algorithm."""

from .fedavg import FedAvg

__all__ = ["FedAvg"]
