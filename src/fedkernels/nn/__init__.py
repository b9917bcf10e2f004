"""Drop-in torch.nn modules built on the fedkernels ops."""

# spread (FedAwS / FedALC)
from .spreadout import SpreadoutRegularizer, learn_fixed_class_embeddings, positive_pull

__all__: list[str] = [
    # spread
    "SpreadoutRegularizer", "learn_fixed_class_embeddings", "positive_pull",
]
