"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath."""

# sketch (FedMLH)
from .sketch import label_hash

# sampled (FedSS)

# select (partial weight exchange)
from .select import delta_norms, masked_weighted_average, num_selected, select_topk_tensors

# prox (l1-difference)

# spread (FedAwS / FedALC)

__all__ = [
    # sketch
    "label_hash",
    # sampled
    # select
    "delta_norms",
    "select_topk_tensors",
    "masked_weighted_average",
    "num_selected",
    # prox
    # spread
]
