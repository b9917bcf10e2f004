"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath."""

# sketch (FedMLH)
from .sketch import label_hash

# sampled (FedSS)

# select (partial weight exchange)

# prox (l1-difference)

# spread (FedAwS / FedALC)
from .spread import PairWeights, knn_classes, pair_weight_gather, spreadout_loss, spreadout_pair_loss

__all__ = [
    # sketch
    "label_hash",
    # sampled
    # select
    # prox
    # spread
    "PairWeights", "knn_classes", "pair_weight_gather", "spreadout_loss", "spreadout_pair_loss",
]
