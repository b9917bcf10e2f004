"""Drop-in torch.nn modules built on the fedkernels ops."""

from .sampled_softmax import SampledSoftmaxHead, logq_correction

__all__: list[str] = ["SampledSoftmaxHead", "logq_correction"]
