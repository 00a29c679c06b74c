import math

import numpy as np
import pytest

from miaudit.studies.intervals import t_interval


def test_t_interval():
    mean, lo, hi = t_interval([1.0, 2.0, 3.0, np.nan])
    assert mean == 2.0 and hi - mean == pytest.approx(4.302653 * 1 / math.sqrt(3), abs=1e-5)
    assert lo == pytest.approx(2 * mean - hi)
    one = t_interval([0.5])
    assert one[0] == 0.5 and math.isnan(one[1]) and math.isnan(one[2])
    assert all(math.isnan(v) for v in t_interval([np.nan]))
