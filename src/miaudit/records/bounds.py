"""The privacy lower bounds as values: what a bound is and what it rests on, with no
computation (the bounds are computed in :mod:`miaudit.privacy`, which re-exports these). Here,
in the records layer, because an attack's metrics record holds them
(:mod:`miaudit.records.privacy`); no scipy is imported.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EpsilonBound:
    """An ε lower bound and everything it rests on.

    With probability at least 1 − ``alpha`` (over the counted samples), a mechanism with this
    ``epsilon`` or less at ``delta`` would not have produced these counts: the mechanism is not
    (ε', ``delta``)-DP for any ε' < ``epsilon``.
    """

    epsilon: float
    method: str
    alpha: float
    delta: float
    n_members: int
    n_nonmembers: int
    fp: int  # non-members with score >= threshold
    fn: int  # members with score < threshold
    fpr_upper: float
    fnr_upper: float
    threshold: float | None = None  # None: the counts were given, not measured

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values in field order, for metrics.json."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GaussianDPBound:
    """``mu``: a lower confidence bound on μ (1 − ``alpha``); ``epsilon``: the ε at ``delta``
    of a μ-GDP mechanism with that μ (an estimate; module doc)."""

    mu: float
    epsilon: float
    method: str
    alpha: float
    delta: float
    n_members: int
    n_nonmembers: int
    fp: int
    fn: int
    fpr_upper: float
    fnr_upper: float
    threshold: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values in field order, for metrics.json."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class OneRunBound:
    """A one-run ε lower bound: with probability ≥ 1 − ``alpha`` over which canaries were
    included, the mechanism is not (ε', ``delta``)-DP for any ε' < ``epsilon``."""

    epsilon: float
    method: str
    alpha: float
    delta: float
    m: int  # canaries
    k_plus: int | None  # None: the counts were given, not the guesses
    k_minus: int | None
    guesses: int  # r = k₊ + k₋
    correct: int  # v

    def to_dict(self) -> dict[str, Any]:
        """Plain Python values in field order, for metrics.json."""
        return dataclasses.asdict(self)
