"""scikit-learn's embedded 8x8 digits: always present, the default for tests and demos."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from miaudit.data.dataset import Dataset
from miaudit.data.registry import register_dataset


@register_dataset(
    "digits",
    kind="image",
    description="scikit-learn handwritten digits, 1,797 x 1x8x8, 10 classes (embedded)",
    source="scikit-learn load_digits() (UCI optical digits test set), shipped with sklearn",
    license="CC BY 4.0 (UCI); sklearn BSD-3",
    num_classes=10,
    preprocessing={
        "standard": "pixels / 16 -> [0, 1]",
        "raw": "integer pixels 0..16 as float32, as load_digits() ships them",
    },
)
def load_digits_dataset(folder: Path, preprocessing: str = "standard") -> Dataset:
    """Digits as images [1797, 1, 8, 8]: pixel / 16 in [0, 1], or raw 0..16."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.asarray(bunch.images, dtype=np.float32)[:, None]
    if preprocessing == "standard":
        images = images / 16.0
    return Dataset(
        name="digits",
        features=images,
        labels=np.asarray(bunch.target, dtype=np.int64),
        num_classes=10,
        kind="image",
        source="sklearn.datasets.load_digits",
        notes="pixels / 16 (the raw range is 0..16)" if preprocessing == "standard"
        else "raw pixels 0..16 (not scaled)",
    )
