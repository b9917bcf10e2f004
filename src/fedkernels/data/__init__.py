"""Data for the federated loop: the XC-format reader, feature hashing, splits, partitioners and
the synthetic power-law default."""

from .datasets import Dataset, load_dataset, load_xc_dataset, to_client_data
from .feature_hashing import hash_features, idf_weights
from .partition import (Shard, dirichlet_partition, fedmlh_partition, frequent_classes, iid_partition,
                        label_counts, make_clients, one_label_per_client)
from .split import train_test_split
from .synthetic import synthetic_multilabel
from .xc_format import XCData, read_xc

__all__ = [
    "Dataset", "Shard", "XCData", "dirichlet_partition", "fedmlh_partition", "frequent_classes", "hash_features",
    "idf_weights", "iid_partition", "label_counts", "load_dataset", "load_xc_dataset", "make_clients",
    "one_label_per_client", "read_xc", "synthetic_multilabel", "to_client_data", "train_test_split",
]
