"""Drop-in torch.nn modules built on the fedkernels ops."""

# sketch (FedMLH)
from .fedmlh import FedMLHHead, default_hash_size

# sampled (FedSS)
from .sampled_softmax import SampledSoftmaxHead, logq_correction

# spread (FedAwS / FedALC)
from .spreadout import SpreadoutRegularizer, learn_fixed_class_embeddings, positive_pull

# topk (fused top-k through a model's last linear layer)
from .topk import sequential_topk

__all__: list[str] = [
    "FedMLHHead",
    "SampledSoftmaxHead",
    "SpreadoutRegularizer",
    "default_hash_size",
    "learn_fixed_class_embeddings",
    "logq_correction",
    "positive_pull",
    "sequential_topk",
]
