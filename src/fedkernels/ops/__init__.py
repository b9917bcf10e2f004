"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath.

Only wrappers of registered ops live here; PyTorch-level solvers (``graph_prox`` and the client
graphs) are in :mod:`fedkernels.solvers`.
"""

from . import autocast as _autocast

# prox (l1-difference)
from .prox import prox_tv1d

# sampled (FedSS)
from .sampled import linear_cross_entropy, negatives_seed, sample_negatives, sample_negatives_batched, scatter_rows_mean

# select (partial weight exchange)
from .select import delta_norms, masked_weighted_average, num_selected, select_topk_tensors

# sketch (FedMLH)
from .sketch import bucket_merge, bucket_merge_topk, count_sketch, count_sketch_query, label_hash

# spread (FedAwS / FedALC)
from .spread import PairWeights, knn_classes, pair_weight_gather, spreadout_loss, spreadout_pair_loss

# topk (fused linear top-k inference)
from .topk import linear_topk

_autocast.register()

# every op above (sorted; the families are the import groups)
__all__ = [
    "PairWeights",
    "bucket_merge",
    "bucket_merge_topk",
    "count_sketch",
    "count_sketch_query",
    "delta_norms",
    "knn_classes",
    "label_hash",
    "linear_cross_entropy",
    "linear_topk",
    "masked_weighted_average",
    "negatives_seed",
    "num_selected",
    "pair_weight_gather",
    "prox_tv1d",
    "sample_negatives",
    "sample_negatives_batched",
    "scatter_rows_mean",
    "select_topk_tensors",
    "spreadout_loss",
    "spreadout_pair_loss",
]
