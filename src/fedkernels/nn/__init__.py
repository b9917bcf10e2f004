"""Drop-in torch.nn modules built on the fedkernels ops."""

__all__: list[str] = []
