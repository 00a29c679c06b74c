"""Across-repetition intervals the studies' summaries share."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats


def t_interval(values: Any, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of the finite ``values`` and its Student-t interval (n − 1 degrees of freedom):
    the spread across targets or seeds, not across samples. NaN bounds for n < 2; all NaN
    when no value is finite."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf((1 + confidence) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half
