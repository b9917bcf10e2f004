"""One Strategy per algorithm."""

from .fedavg import FedAvg
from .fedss import FedSS, FullSoftmax, NegOnly, PosOnly

__all__ = ["FedAvg", "FedSS", "FullSoftmax", "NegOnly", "PosOnly"]
