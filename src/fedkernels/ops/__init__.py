"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath."""

# prox (l1-difference, and the graph prox of its personalised network variant)
from .client_graph import feature_space_graph, knn_graph, model_space_graph
from .graph_prox import GraphProxResult, graph_prox
from .prox import prox_tv1d

# sampled (FedSS)
from .sampled import client_seed, linear_cross_entropy, sample_negatives, sample_negatives_batched, scatter_rows_mean

# select (partial weight exchange)
from .select import delta_norms, masked_weighted_average, num_selected, select_topk_tensors

# sketch (FedMLH)
from .sketch import bucket_merge, bucket_merge_topk, count_sketch, count_sketch_query, label_hash

# spread (FedAwS / FedALC)
from .spread import PairWeights, knn_classes, pair_weight_gather, spreadout_loss, spreadout_pair_loss

# every op above (sorted; the families are the import groups)
__all__ = [
    "GraphProxResult",
    "PairWeights",
    "bucket_merge",
    "bucket_merge_topk",
    "client_seed",
    "count_sketch",
    "count_sketch_query",
    "delta_norms",
    "feature_space_graph",
    "graph_prox",
    "knn_classes",
    "knn_graph",
    "label_hash",
    "linear_cross_entropy",
    "masked_weighted_average",
    "model_space_graph",
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
