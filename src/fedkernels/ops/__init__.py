"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath."""

# sketch (FedMLH)
# prox (l1-difference)
from .prox import prox_tv1d

# sampled (FedSS)
from .sampled import linear_cross_entropy, negatives_seed, sample_negatives, sample_negatives_batched, scatter_rows_mean

# select (partial weight exchange)
from .select import delta_norms, masked_weighted_average, num_selected, select_topk_tensors
from .sketch import bucket_merge, bucket_merge_topk, count_sketch, count_sketch_query, label_hash

# spread (FedAwS / FedALC)
from .spread import PairWeights, knn_classes, pair_weight_gather, spreadout_loss, spreadout_pair_loss

__all__ = [
    # sketch
    "label_hash",
    "bucket_merge",
    "bucket_merge_topk",
    "count_sketch",
    "count_sketch_query",
    # sampled
    "negatives_seed",
    "linear_cross_entropy",
    "sample_negatives",
    "sample_negatives_batched",
    "scatter_rows_mean",
    # select
    "delta_norms",
    "select_topk_tensors",
    "masked_weighted_average",
    "num_selected",
    # prox
    "prox_tv1d",
    # spread
    "PairWeights",
    "knn_classes",
    "pair_weight_gather",
    "spreadout_loss",
    "spreadout_pair_loss",
]
