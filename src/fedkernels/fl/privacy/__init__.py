"""Private federated learning: SecAgg+ secure aggregation and differential privacy for every algorithm.

Requires the optional extra ``fedkernels[privacy]`` (``cryptography``, ``pycryptodome``,
``dp-accounting``). See ``docs/api/privacy.md`` for the threat model, what each algorithm still leaks,
each knob and the measured costs.
"""

from .dp import DPConfig, epsilon, noise_for_epsilon
from .forms import DenseForm, L1DiffForm, PartialForm, RowsForm, form_of
from .mechanism import poisson_clients
from .ring import RingCodec, fraction_bits
from .secagg import SecAggClient, SecAggError, SecAggParams, SecAggServer, neighbour_graph
from .secagg_params import GraphParams, graph_params
from .server import PrivacyConfig, PrivateServer

__all__ = [
    "DPConfig",
    "DenseForm",
    "GraphParams",
    "L1DiffForm",
    "PartialForm",
    "PrivacyConfig",
    "PrivateServer",
    "RingCodec",
    "RowsForm",
    "SecAggClient",
    "SecAggError",
    "SecAggParams",
    "SecAggServer",
    "epsilon",
    "form_of",
    "fraction_bits",
    "graph_params",
    "neighbour_graph",
    "noise_for_epsilon",
    "poisson_clients",
]
