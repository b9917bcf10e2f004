"""Drop-in torch.nn modules built on the fedkernels ops."""

from .fedmlh import FedMLHHead

__all__: list[str] = ["FedMLHHead"]
