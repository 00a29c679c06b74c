import numpy as np
import pytest
from sklearn.datasets import load_digits


@pytest.fixture(scope="session")
def digits():
    """300 sklearn digits as float32 [N, 1, 8, 8] in [0, 1] and int64 labels."""
    data = load_digits()
    x = (data.images[:300] / 16.0).astype(np.float32)[:, None]
    y = data.target[:300].astype(np.int64)
    return x, y
