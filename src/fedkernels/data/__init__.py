"""Data for the federated loop: the XC-format, libsvm and .npz readers, the registry and fetcher of
public datasets (``fedkernels data``), feature hashing, splits, partitioners and the synthetic default."""

from .arff import read_mulan_arff
from .client_store import ClientStore, ClientStoreWriter, write_client_store
from .datasets import Dataset, load_dataset, load_xc_dataset, resolve_dataset, to_client_data
from .declared import DeclaredShape, declared_shape
from .feature_hashing import hash_features, idf_weights
from .fetcher import DownloadError, cache_dir, dataset_dir, fetch, is_fetched, sha256_of, verify
from .formats import read_any, read_libsvm, read_npz, write_xc
from .labels import labels_to_csr, multi_hot_to_csr
from .locations import data_dir, data_roots
from .partition import (
    Shard,
    dirichlet_partition,
    dirichlet_sample_partition,
    fedmlh_partition,
    frequent_classes,
    iid_partition,
    label_counts,
    make_clients,
    one_label_per_client,
    primary_label_partition,
    split_statistics,
)
from .remote import RemoteDataset, RemoteFile, find_remote, get_remote, register, remote_datasets, unregister
from .split import train_test_split
from .synthetic import synthetic_multilabel
from .types import ClientData
from .xc_format import XCData, read_xc
from .xc_layouts import Layout, find_layout, read_filter, read_layout, read_sparse_text, read_split
from .xc_population import PopulationSpec, write_xc_population
from .xc_synthetic import XCSpec, iter_synthetic_xc, synthetic_xc

__all__ = [
    "ClientData",
    "ClientStore",
    "ClientStoreWriter",
    "Dataset",
    "DeclaredShape",
    "DownloadError",
    "Layout",
    "PopulationSpec",
    "RemoteDataset",
    "RemoteFile",
    "Shard",
    "XCData",
    "XCSpec",
    "cache_dir",
    "data_dir",
    "data_roots",
    "dataset_dir",
    "declared_shape",
    "dirichlet_partition",
    "dirichlet_sample_partition",
    "fedmlh_partition",
    "fetch",
    "find_layout",
    "find_remote",
    "frequent_classes",
    "get_remote",
    "hash_features",
    "idf_weights",
    "iid_partition",
    "is_fetched",
    "iter_synthetic_xc",
    "label_counts",
    "labels_to_csr",
    "load_dataset",
    "load_xc_dataset",
    "make_clients",
    "multi_hot_to_csr",
    "one_label_per_client",
    "primary_label_partition",
    "read_any",
    "read_filter",
    "read_layout",
    "read_libsvm",
    "read_mulan_arff",
    "read_npz",
    "read_sparse_text",
    "read_split",
    "read_xc",
    "register",
    "remote_datasets",
    "resolve_dataset",
    "sha256_of",
    "split_statistics",
    "synthetic_multilabel",
    "synthetic_xc",
    "to_client_data",
    "train_test_split",
    "unregister",
    "verify",
    "write_client_store",
    "write_xc",
    "write_xc_population",
]
