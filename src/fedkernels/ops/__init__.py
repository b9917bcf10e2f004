"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath."""

from .sketch import label_hash

__all__ = [
    # sketch (FedMLH)
    "label_hash",
]
