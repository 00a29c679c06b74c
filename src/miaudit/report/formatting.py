"""How numbers read in every table, verdict and caption: one formatter per kind of number."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def fmt_pct(value: float | None) -> str:
    """A rate as a percentage without the sign: 2 decimals below 1%, 1 decimal above; '-'
    when missing."""
    if value is None or not math.isfinite(value):
        return "-"
    pct = 100 * value
    return f"{pct:.2f}" if abs(pct) < 1 else f"{pct:.1f}"


def pct(value: float) -> str:
    """A rate as a percentage with its sign: 0.048 -> '4.8%'."""
    return fmt_pct(value) + "%"


def rate(fpr: float) -> str:
    """An FPR as the config states it: 0.001 -> '0.1%'."""
    return f"{100 * fpr:g}%"


def fmt_auc(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def fmt_ci(ci: Any, fmt: Callable[[float], str]) -> str:
    """' [low, high]' in ``fmt``, or '' when there is no interval."""
    if not ci or len(ci) != 2 or ci[0] is None:
        return ""
    return f" [{fmt(ci[0])}, {fmt(ci[1])}]"
