"""The public ops, one module per kernel family. Each is ``torch.ops.fedkernels.<name>`` underneath."""

# sketch (FedMLH)
from .sketch import label_hash

# sampled (FedSS)

# select (partial weight exchange)

# prox (l1-difference)
from .client_graph import feature_space_graph, knn_graph, model_space_graph
from .graph_prox import GraphProxResult, graph_prox
from .prox import prox_tv1d

# spread (FedAwS / FedALC)

__all__ = [
    # sketch
    "label_hash",
    # sampled
    # select
    # prox
    "prox_tv1d",
    "graph_prox",
    "GraphProxResult",
    "knn_graph",
    "model_space_graph",
    "feature_space_graph",
    # spread
]
