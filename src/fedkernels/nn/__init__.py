"""Drop-in torch.nn modules built on the fedkernels ops."""

# sketch (FedMLH)
from .fedmlh import FedMLHHead

# sampled (FedSS)
from .sampled_softmax import SampledSoftmaxHead, logq_correction

__all__: list[str] = ["FedMLHHead", "SampledSoftmaxHead", "logq_correction"]
