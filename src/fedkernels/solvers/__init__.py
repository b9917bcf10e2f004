"""PyTorch-level solvers (iterative methods, not compiled kernels) the algorithms build on.

``fedkernels.ops`` holds only wrappers of registered ops; these are plain PyTorch code. Their names are
also exported as ``fedkernels.<name>``.
"""

from .client_graph import feature_space_graph, kernel_graph, knn_graph, model_space_graph
from .graph_prox import GraphProxResult, graph_prox, project_l1_ball

__all__ = [
    "GraphProxResult",
    "feature_space_graph",
    "graph_prox",
    "kernel_graph",
    "knn_graph",
    "model_space_graph",
    "project_l1_ball",
]
