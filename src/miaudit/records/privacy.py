"""An attack's privacy lower bounds, typed: the entries of its metrics dict (metrics.json)
that :mod:`miaudit.privacy.attack_bounds` writes (docs/algorithms.md §16).

- ``epsilon_lower_bound``: the Clopper–Pearson threshold bound on the target's audit samples,
  τ chosen on a seeded stratified half (the *selection* half), counted on the other;
- ``gaussian_dp_lower_bound``: the μ-GDP lower bound (Nasr et al. 2023) on the same halves,
  τ chosen on the selection half to maximise μ, with its ε at δ (an estimate);
- ``canary_epsilon_lower_bound``, ``canary_gaussian_dp_lower_bound``: the same two on the
  canaries (membership = inclusion);
- ``one_run``: the one-run bound on the canaries (Steinke, Nasr & Jagielski 2023).

Each is ``{**bound.to_dict(), ...what it rests on}``, or ``{"epsilon": None, "reason": ...}``
(``{"mu": None, ...}`` for a Gaussian-DP entry) when there is no bound. ``from_dict(d).to_dict()
== d`` (same keys, order and values). The bounds' value types are :mod:`miaudit.records.bounds`'
(no scipy: ``import miaudit`` stays free of it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from miaudit.records import bounds
from miaudit.records.bounds import EpsilonBound, GaussianDPBound, OneRunBound

# The metrics-dict keys (and to_frame's metric names), spelled here only, in the order
# the pipeline writes them.
EPSILON_LOWER_BOUND = "epsilon_lower_bound"
GAUSSIAN_DP_LOWER_BOUND = "gaussian_dp_lower_bound"
CANARY_EPSILON_LOWER_BOUND = "canary_epsilon_lower_bound"
CANARY_GAUSSIAN_DP_LOWER_BOUND = "canary_gaussian_dp_lower_bound"
ONE_RUN = "one_run"
EPSILON_KEYS = (EPSILON_LOWER_BOUND, GAUSSIAN_DP_LOWER_BOUND, CANARY_EPSILON_LOWER_BOUND,
                CANARY_GAUSSIAN_DP_LOWER_BOUND, ONE_RUN)
# The kind (BestBound.kind, "bound" in JSON) of a run's best μ when it is the one-run f-DP
# bound (Mahloujifar, Melis & Chaudhuri 2025) on a candidate's counts: not a metrics key (no
# attack records it; privacy_audit computes it from the one-run record's counts), so it is
# not in EPSILON_KEYS.
FDP_ONE_RUN = "fdp_one_run"
# what the best bound says of a DP claim (miaudit.privacy.attack_bounds.claim_finding)
REFUTED = "refuted"  # above the claim, with a proof: the claim does not hold
EVIDENCE_AGAINST = "evidence against"  # above it, valid if membership was drawn at random
WITHHELD = "withheld"  # above it, but the split is told apart without the model
NOT_EXCEEDED = "not exceeded"
# the threshold ε bound of a set of samples -> the μ-GDP bound of the same samples
GAUSSIAN_DP_OF = {EPSILON_LOWER_BOUND: GAUSSIAN_DP_LOWER_BOUND,
                  CANARY_EPSILON_LOWER_BOUND: CANARY_GAUSSIAN_DP_LOWER_BOUND}


_Record = TypeVar("_Record", bound="_HalvesRecord")


def _fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    return {f.name: data[f.name] for f in dataclasses.fields(cls)}


@dataclass(frozen=True)
class _HalvesRecord:
    """A bound of a threshold test on seeded halves, with the half that chose τ
    (``selection_*``: ``split_halves(flags, selection_seed)[0]`` holds those samples; the
    bound's counts are the other half), or why there is none (``reason``). ``unscorable``:
    NaN scores, counted as the lowest (-inf). Subclasses name the bound's type."""

    bound: Any
    selection_seed: int | None = None
    selection_members: int | None = None
    selection_nonmembers: int | None = None
    unscorable: int = 0
    reason: str | None = None

    HEADLINE: ClassVar[str] = "epsilon"  # the bound's field the dict sets None when no bound
    # The bound's dataclass in miaudit.records.bounds, by name
    BOUND_TYPE: ClassVar[str] = "EpsilonBound"

    @classmethod
    def _bound_type(cls) -> type:
        found: type = getattr(bounds, cls.BOUND_TYPE)
        return found

    @property
    def value(self) -> float | None:
        """The figure the report shows (the bound's ``HEADLINE`` field), None without one."""
        return None if self.bound is None else getattr(self.bound, self.HEADLINE)

    @property
    def epsilon(self) -> float | None:
        return None if self.bound is None else self.bound.epsilon

    @classmethod
    def from_dict(cls: type[_Record], data: dict[str, Any]) -> _Record:
        if data.get(cls.HEADLINE) is None:
            return cls(None, reason=data.get("reason"))
        bound_type = cls._bound_type()
        chosen = data.get("selection") or {}
        return cls(bound_type(**_fields(bound_type, data)),
                   selection_seed=chosen.get("seed"),
                   selection_members=chosen.get("n_members"),
                   selection_nonmembers=chosen.get("n_nonmembers"),
                   unscorable=int(data.get("unscorable") or 0))

    def to_dict(self) -> dict[str, Any]:
        if self.bound is None:
            return {self.HEADLINE: None, "reason": self.reason}
        return {**self.bound.to_dict(),
                "selection": {"seed": self.selection_seed, "n_members": self.selection_members,
                              "n_nonmembers": self.selection_nonmembers},
                "unscorable": self.unscorable}


@dataclass(frozen=True)
class ThresholdEpsilon(_HalvesRecord):
    """The Clopper–Pearson threshold ε bound on seeded halves (:class:`_HalvesRecord`)."""

    bound: EpsilonBound | None


@dataclass(frozen=True)
class ThresholdGaussianDP(_HalvesRecord):
    """The μ-GDP lower bound on seeded halves (:class:`_HalvesRecord`; τ maximised μ on the
    selection half): ``mu`` holds at 1 − α; ``epsilon``, its ε at δ, is an estimate valid if
    the target's trade-off curve is Gaussian (docs/algorithms.md §16)."""

    bound: GaussianDPBound | None

    HEADLINE: ClassVar[str] = "mu"
    BOUND_TYPE: ClassVar[str] = "GaussianDPBound"

    @property
    def mu(self) -> float | None:
        return self.value


@dataclass(frozen=True)
class GuessCandidate:
    """One (k₊, k₋) pair of ``canaries.guesses``: its correct guesses and its bound at the
    candidates' shared α. ``epsilon`` None: this pair cannot certify ε > 0 there; its
    ``correct`` is still recorded (runs before the f-DP bound wrote None), because the one-run
    f-DP bound of the best μ (:mod:`miaudit.privacy.best_bound`) needs only the counts."""

    k_plus: int
    k_minus: int
    correct: int | None
    epsilon: float | None


@dataclass(frozen=True)
class OneRunEpsilon:
    """The best candidate's one-run bound (its ``alpha`` is ``family_alpha`` / candidates:
    Bonferroni, so the best holds at 1 − ``family_alpha``), every candidate, the canaries
    included, or why there is no bound."""

    bound: OneRunBound | None
    candidates: tuple[GuessCandidate, ...] = ()
    family_alpha: float | None = None
    included: int | None = None
    unscorable: int = 0
    reason: str | None = None

    @property
    def epsilon(self) -> float | None:
        return None if self.bound is None else self.bound.epsilon

    @property
    def value(self) -> float | None:
        """The figure the report shows: ``epsilon``."""
        return self.epsilon

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OneRunEpsilon:
        if data.get("epsilon") is None:
            return cls(None, reason=data.get("reason"))
        return cls(OneRunBound(**_fields(OneRunBound, data)),
                   candidates=tuple(GuessCandidate(**c) for c in data.get("candidates") or ()),
                   family_alpha=data.get("family_alpha"), included=data.get("included"),
                   unscorable=int(data.get("unscorable") or 0))

    def to_dict(self) -> dict[str, Any]:
        if self.bound is None:
            return {"epsilon": None, "reason": self.reason}
        return {**self.bound.to_dict(), "family_alpha": self.family_alpha,
                "candidates": [dataclasses.asdict(c) for c in self.candidates],
                "included": self.included, "unscorable": self.unscorable}


# How each key's dict is typed.
EPSILON_TYPES: dict[str, type[ThresholdEpsilon | ThresholdGaussianDP | OneRunEpsilon]] = {
    EPSILON_LOWER_BOUND: ThresholdEpsilon,
    GAUSSIAN_DP_LOWER_BOUND: ThresholdGaussianDP,
    CANARY_EPSILON_LOWER_BOUND: ThresholdEpsilon,
    CANARY_GAUSSIAN_DP_LOWER_BOUND: ThresholdGaussianDP,
    ONE_RUN: OneRunEpsilon,
}
