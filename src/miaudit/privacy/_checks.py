"""Input checks shared by the ε lower bounds. Each error says what is wrong and how to fix it."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from miaudit.errors import ConfigError


def check_delta(delta: Any) -> float:
    """δ of the (ε, δ) claim under test: a float in [0, 1)."""
    d = _real(delta, "delta")
    if not 0.0 <= d < 1.0:
        raise ConfigError(
            f"delta must be in [0, 1), got {delta!r}: pass the δ of the (ε, δ)-DP claim you "
            "audit (0 for pure ε-DP; typically 1e-5 or 1/n for n training samples)"
        )
    return d


def check_alpha(alpha: Any) -> float:
    """Significance α: the bound fails to hold with probability at most α; in (0, 1)."""
    a = _real(alpha, "alpha")
    if not 0.0 < a < 1.0:
        raise ConfigError(
            f"alpha must be in (0, 1), got {alpha!r}: it is one minus the confidence of the "
            "bound (0.05 for 95 % confidence)"
        )
    return a


def check_count(value: Any, name: str, *, low: int = 0, high: int | None = None,
                hint: str = "") -> int:
    """An integer count in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer count, got {value!r}{hint}")
    v = int(value)
    if v < low or (high is not None and v > high):
        where = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ConfigError(f"{name} must be in {where}, got {v}{hint}")
    return v


def check_scores(scores: Any, membership: Any, what: str,
                 flag: str = "membership") -> tuple[np.ndarray, np.ndarray]:
    """(float64 scores, bool flags) for one set of samples; both classes must be present."""
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{what} scores must be numeric: {exc}") from exc
    f = np.asarray(membership)
    if s.ndim != 1 or f.ndim != 1 or s.shape != f.shape:
        raise ConfigError(
            f"{what} scores and {flag} must be 1-D arrays of the same length, got shapes "
            f"{s.shape} and {f.shape}: pass one score and one {flag} flag per sample"
        )
    if s.size == 0:
        raise ConfigError(f"the {what} set is empty: pass at least one member and one "
                          "non-member")
    if f.dtype != bool:
        if not np.isin(f, (0, 1)).all():
            raise ConfigError(f"{what} {flag} must be boolean or 0/1 flags (1 = member)")
        f = f.astype(bool)
    n_nan = int(np.isnan(s).sum())
    if n_nan:
        raise ConfigError(
            f"{n_nan} of the {s.size} {what} scores are NaN: an ε bound needs a score for "
            "every sample; drop the unscorable samples from both classes or give them the "
            "lowest score (-inf), which counts them as predicted non-members"
        )
    return s, f


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if math.isnan(v):
        raise ConfigError(f"{name} is NaN: pass a number")
    return v


def check_error_counts(fp: Any, n0: Any, fn: Any, n1: Any) -> tuple[int, int, int, int]:
    """A threshold test's counts: n0 >= 1 non-members (fp of them flagged) and n1 >= 1 members
    (fn of them missed)."""
    n0 = check_count(n0, "n0 (non-members counted)", low=1,
                     hint=": the bound needs at least one non-member")
    n1 = check_count(n1, "n1 (members counted)", low=1,
                     hint=": the bound needs at least one member")
    fp = check_count(fp, "fp (false positives)", high=n0, hint=f" (out of n0 = {n0})")
    fn = check_count(fn, "fn (false negatives)", high=n1, hint=f" (out of n1 = {n1})")
    return fp, n0, fn, n1
