"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath."""

# sketch (FedMLH)
from .sketch import label_hash

# sampled (FedSS)
from .sampled import (client_seed, linear_cross_entropy, sample_negatives, sample_negatives_batched,
                      scatter_rows_mean)

# select (partial weight exchange)

# prox (l1-difference)

# spread (FedAwS / FedALC)

__all__ = [
    # sketch
    "label_hash",
    # sampled
    "client_seed", "linear_cross_entropy", "sample_negatives", "sample_negatives_batched", "scatter_rows_mean",
    # select
    # prox
    # spread
]
