"""fedkernels: compiled CPU/CUDA kernels for communication-efficient federated learning.

Every op is a registered custom op, ``torch.ops.fedkernels.<name>``, re-exported here with
docstrings; see ``fedkernels.ops``. ``fedkernels.nn`` holds drop-in modules and
``fedkernels.fl`` the federated loop.
"""

import torch  # noqa: F401  (loads libtorch before the extension)

from . import _C
from . import nn as nn  # the subpackage as an attribute (fedkernels.nn); its names are documented there
from ._info import info
from .hashing import HashFamily
from .ops import *  # noqa: F403  (the ops are the package's public names; ops.__all__ lists them)
from .ops import __all__ as _ops_all
from .solvers import *  # noqa: F403
from .solvers import __all__ as _solvers_all

__version__ = _C.build_info()["version"]
__all__ = ["HashFamily", "__version__", "info", *_ops_all, *_solvers_all]
