"""Small helpers for study summaries: markdown tables and mean ± std formatting."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd


def _cell_text(value: Any, floatfmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return format(value, floatfmt)
    return str(value)


def markdown_table(table: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A GitHub-flavoured markdown table of ``table`` (no index); NaN shows as ``-``."""
    header = [str(c) for c in table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(_cell_text(v, floatfmt) for v in row) + " |")
    return "\n".join(lines)


def mean_std(values: Sequence[float] | pd.Series, digits: int = 3) -> str:
    """``0.612 ± 0.013 (n)`` style text of finite values: mean, sample std; ``-`` if none."""
    series = pd.Series(values, dtype="float64").dropna()
    if series.empty:
        return "-"
    if len(series) == 1:
        return f"{series.iloc[0]:.{digits}f}"
    return f"{series.mean():.{digits}f} ± {series.std(ddof=1):.{digits}f}"
