"""Training rows as tensors: checked index sets, gathered rows, the class count.

Shared by every training path (``trainer``, ``stacked``, ``dp``, ``forgetting``); re-exported
by :mod:`miaudit.train.trainer`, where they lived first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import torch

from miaudit.errors import ConfigError

ArrayLike: TypeAlias = np.ndarray | torch.Tensor


def as_device_tensor(
    array: ArrayLike, device: str | torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """``array`` as a tensor of ``dtype`` on ``device`` (no copy when it already is one)."""
    return torch.as_tensor(array).to(device=device, dtype=dtype)


def infer_num_classes(labels: ArrayLike) -> int:
    """``labels.max() + 1``: the number of classes a dataset's labels imply."""
    if len(labels) == 0:
        raise ConfigError("labels are empty; cannot infer num_classes.")
    return int(labels.max()) + 1


def check_indices(indices: ArrayLike, n: int) -> np.ndarray:
    """``indices`` as sorted int64 numpy rows, checked to be a non-empty 1-D subset of [0, n)."""
    idx = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices)
    if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
        raise ConfigError(
            f"indices must be a non-empty 1-D integer array of training rows, got shape "
            f"{idx.shape} dtype {idx.dtype}."
        )
    if idx.min() < 0 or idx.max() >= n:
        raise ConfigError(
            f"indices must lie in [0, {n}) (the number of rows), got range "
            f"[{idx.min()}, {idx.max()}]."
        )
    # A model depends on the multiset of rows, not their order: sort so order never matters.
    return np.sort(idx.astype(np.int64, copy=False))


def gather_rows(
    array: ArrayLike, idx: np.ndarray, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """Rows ``idx`` of ``array`` as a ``dtype`` tensor on ``device``."""
    if isinstance(array, torch.Tensor):
        rows = torch.as_tensor(idx, device=array.device)
        return array.index_select(0, rows).to(device=device, dtype=dtype)
    return torch.as_tensor(np.take(np.asarray(array), idx, axis=0)).to(device=device, dtype=dtype)


@dataclass(frozen=True)
class TrainingRows:
    """One model's checked training rows on its device."""

    idx: np.ndarray  # sorted int64 row ids
    x: torch.Tensor  # float32 [n, ...]
    y: torch.Tensor  # int64 [n], each in [0, n_classes)
    n_classes: int


def training_rows(
    features: ArrayLike,
    labels: ArrayLike,
    indices: ArrayLike,
    device: torch.device,
    num_classes: int | None = None,
) -> TrainingRows:
    """Rows `indices` of `features`/`labels` on `device`, with every check a trainer needs:
    equal lengths, valid indices, labels in [0, num_classes) (default: labels.max() + 1 over
    all rows, so models on different subsets share an output size)."""
    if len(features) != len(labels):
        raise ConfigError(f"features has {len(features)} rows but labels has {len(labels)}.")
    idx = check_indices(indices, len(features))
    n_classes = infer_num_classes(labels) if num_classes is None else int(num_classes)
    x = gather_rows(features, idx, device, torch.float32)
    y = gather_rows(labels, idx, device, torch.int64)
    if int(y.min()) < 0 or int(y.max()) >= n_classes:
        raise ConfigError(
            f"training labels must lie in [0, {n_classes}) (num_classes), got range "
            f"[{int(y.min())}, {int(y.max())}]; pass the right num_classes."
        )
    return TrainingRows(idx, x, y, n_classes)
