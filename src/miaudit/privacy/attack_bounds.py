"""ε and μ-GDP lower bounds for every attack of a run, and the best of them
(docs/algorithms.md §16).

:class:`EpsilonPlan` fixes, before any attack is scored, everything the bounds rest on: δ (the
target's DP-SGD δ, else ``metrics.epsilon_delta``), α, the seeded halves of the audit samples
(τ is chosen on the selection half and counted on the other, never on the counted samples)
and, with canaries, their inclusion, halves and the (k₊, k₋) guesses. ``plan.bounds(scores)``
gives one attack's metrics entries (:mod:`miaudit.records.privacy`), vectorised by
:mod:`miaudit.privacy`: the threshold ε bound and the μ-GDP bound (Nasr et al. 2023) of each
set of halves, each with its own τ chosen on the same selection half, typed
(:mod:`miaudit.records.privacy`). :func:`~miaudit.privacy.best_bound.privacy_audit` (importable
from here too) names the best ε bound of all attacks, every bound recounted at α / K (Bonferroni
over the K bounds compared), so that the best holds at 1 − α, and the best μ bound the same
way over the μ bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np

from miaudit.config.sections import CanariesConfig, MetricsConfig
from miaudit.errors import ConfigError
from miaudit.privacy import (
    OneRunBound,
    clopper_pearson_upper,
    epsilon_from_counts,
    gaussian_dp_from_counts,
    mu_from_rates,
    one_run_epsilon,
    split_halves,
)
from miaudit.privacy.audit_record import (
    MEMBERSHIP_SOURCES,
    CanarySettings,
    Claim,
    PrivacySettings,
)
from miaudit.privacy.audit_record import claim_finding as claim_finding  # importable from here
from miaudit.privacy.audit_record import rests_on_proof as rests_on_proof
from miaudit.privacy.best_bound import privacy_audit as privacy_audit  # importable from here
from miaudit.privacy.bounds import best_threshold, count_at, epsilon_from_rates
from miaudit.privacy.canaries import resolve_guesses
from miaudit.records.outcomes import BoundRecord
from miaudit.records.privacy import (
    CANARY_EPSILON_LOWER_BOUND,
    CANARY_GAUSSIAN_DP_LOWER_BOUND,
    EPSILON_LOWER_BOUND,
    EPSILON_TYPES,
    GAUSSIAN_DP_LOWER_BOUND,
    ONE_RUN,
    GuessCandidate,
    OneRunEpsilon,
    ThresholdEpsilon,
    ThresholdGaussianDP,
)
from miaudit.signals import SignalBank

MODEL_FREE_REASON = ("a model-free attack: it never reads the model, so it bounds nothing "
                     "about it; a score above chance means the split itself differs")


def split_seed(seed: int, stream: int) -> int:
    """The seed of ``split_halves`` for a run seed (stream 0: audit samples, 1: canaries),
    recorded with every bound so that anyone can redo the halves."""
    return int(np.random.SeedSequence([seed, 16, stream]).generate_state(1)[0])


def claim_of(target_privacy: Mapping[str, Any] | None) -> Claim | None:
    """The (ε, δ) claim of a DP-SGD target's privacy record (``epsilon_spent`` as Opacus's
    accountant computed it, or a plain ``epsilon``), None without one."""
    if not target_privacy:
        return None
    eps = target_privacy.get("epsilon_spent", target_privacy.get("epsilon"))
    if eps is None or target_privacy.get("delta") is None:
        return None
    return Claim(float(eps), float(target_privacy["delta"]),
                 target_epsilon=target_privacy.get("target_epsilon"),
                 accountant=target_privacy.get("accountant"))


@dataclass(frozen=True)
class Halves:
    """The seeded halves of one set of samples (:func:`miaudit.privacy.split_halves`), and the
    objectives that pick τ on the selection half (ε's, and μ's for the Gaussian-DP bound).

    The objective is :func:`miaudit.privacy.choose_threshold`'s, with the Clopper–Pearson
    bounds of every possible count tabulated once (n₀ + n₁ + 2 quantiles) instead of twice
    per candidate τ: every attack of a run shares the halves, so the scipy quantiles are paid
    once per run, not once per attack (on 100,000 audit samples about 0.2 s an attack). It
    picks exactly choose_threshold's τ (tests/pipeline/test_epsilon_bounds.py)."""

    select: np.ndarray  # sample indices whose scores choose τ
    count: np.ndarray  # sample indices counted at τ
    fpr_upper: np.ndarray  # [n₀ + 1]: FPR⁺ of each possible count of false positives
    fnr_upper: np.ndarray  # [n₁ + 1]
    seed: int
    delta: float
    alpha: float

    @classmethod
    def of(cls, flags: np.ndarray, seed: int, delta: float, alpha: float) -> Halves:
        select, count = split_halves(flags, seed)
        n1 = int(flags[select].sum())
        n0 = int(select.size - n1)
        level = 1.0 - alpha / 2  # as epsilon_array: each rate at 1 − α/2, both at 1 − α
        return cls(select, count, np.asarray(clopper_pearson_upper(np.arange(n0 + 1), n0, level)),
                   np.asarray(clopper_pearson_upper(np.arange(n1 + 1), n1, level)), seed,
                   delta, alpha)

    def objective(self, fp: np.ndarray, n0: int, fn: np.ndarray, n1: int) -> np.ndarray:
        """privacy.epsilon_array(fp, n0, fn, n1, δ, α) from the tables."""
        return epsilon_from_rates(self.fpr_upper[fp], self.fnr_upper[fn], self.delta)

    def mu_objective(self, fp: np.ndarray, n0: int, fn: np.ndarray, n1: int) -> np.ndarray:
        """privacy.mu_array(fp, n0, fn, n1, α) from the same tables (the level is the same,
        1 − α/2 per rate): picks gaussian_dp_lower_bound's τ."""
        return mu_from_rates(self.fpr_upper[fp], self.fnr_upper[fn])


def _halves(flags: np.ndarray, seed: int, delta: float, alpha: float
            ) -> tuple[Halves | None, str]:  # fmt: skip
    try:
        return Halves.of(flags, seed, delta, alpha), ""
    except ConfigError as exc:  # too few members or non-members: recorded, never fatal
        return None, str(exc)


def _scorable(scores: np.ndarray) -> tuple[np.ndarray, int]:
    """NaN scores as -inf (the metrics' rule: ranked lowest, never predicted member), and how
    many there were."""
    nan = np.isnan(scores)
    return np.where(nan, -np.inf, scores), int(nan.sum())


_Halved = TypeVar("_Halved", ThresholdEpsilon, ThresholdGaussianDP)


def _halves_record(record: type[_Halved], objective: Callable[..., np.ndarray],
                   from_counts: Callable[..., Any], scores: np.ndarray, flags: np.ndarray,
                   halves: Halves | None, why_not: str) -> _Halved:
    """The metrics entry of one bound on ``halves`` (at its δ and α): τ maximises
    ``objective(halves, fp, n0, fn, n1)`` on ``halves.select``, then ``from_counts`` bounds
    FP and FN counted on ``halves.count`` (never on the samples that chose τ)."""
    if halves is None:
        return record(None, reason=why_not)
    s, unscorable = _scorable(np.asarray(scores, dtype=np.float64))
    if unscorable == s.size:
        return record(None, reason="the attack scored no sample")
    select, count = halves.select, halves.count
    try:
        tau = best_threshold(s[select], flags[select], partial(objective, halves))
        fp, n0, fn, n1 = count_at(tau, s[count], flags[count])
        bound = from_counts(fp, n0, fn, n1, halves.delta, halves.alpha, threshold=tau)
    except ConfigError as exc:
        return record(None, reason=str(exc))
    chosen = flags[select]
    return record(bound, halves.seed, int(chosen.sum()), int((~chosen).sum()), unscorable)


def threshold_record(scores: np.ndarray, flags: np.ndarray, halves: Halves | None,
                     why_not: str = "") -> ThresholdEpsilon:
    """The threshold bound's metrics entry at the halves' δ and α: τ chosen on
    ``halves.select``, FP and FN counted on ``halves.count`` (never on the samples that chose
    τ); ``why_not`` the reason when there are no halves."""
    return _halves_record(ThresholdEpsilon, Halves.objective, epsilon_from_counts, scores,
                          flags, halves, why_not)


def gaussian_dp_record(scores: np.ndarray, flags: np.ndarray, halves: Halves | None,
                       why_not: str = "") -> ThresholdGaussianDP:
    """The μ-GDP bound's metrics entry, under :func:`threshold_record`'s rules (the same
    halves, δ and α): τ maximising μ on ``halves.select``, μ and its ε at δ from FP and FN
    counted on ``halves.count``, i.e. ``privacy.gaussian_dp_lower_bound`` on the two halves.
    The halves' δ must be > 0 (μ-GDP has no finite ε at δ = 0)."""
    return _halves_record(ThresholdGaussianDP, Halves.mu_objective, gaussian_dp_from_counts,
                          scores, flags, halves, why_not)


def correct_guesses(scores: np.ndarray, included: np.ndarray, k_plus: int, k_minus: int
                    ) -> int | None:  # fmt: skip
    """v: how many of the guesses of :func:`miaudit.privacy.one_run_epsilon` are right (IN on
    the ``k_plus`` highest scores, OUT on the ``k_minus`` lowest, ties by position), for a
    candidate whose ε cannot be certified: the one-run f-DP bound of the best μ
    (:mod:`miaudit.privacy.best_bound`) needs only this count. ``scores`` already scorable
    (:func:`_scorable`). None when the guesses do not fit the m canaries (k₊ + k₋ outside
    [1, m]) or ``included`` is not one flag per score: no count, as one_run_epsilon refuses."""
    inc = np.asarray(included, dtype=bool)
    if inc.shape != scores.shape or scores.ndim != 1 or not 1 <= k_plus + k_minus <= scores.size:
        return None
    order = np.argsort(scores, kind="stable")  # ascending, as one_run_epsilon ranks them
    guessed_out, guessed_in = order[:k_minus], order[scores.size - k_plus:]
    return int(inc[guessed_in].sum() + (~inc[guessed_out]).sum())


def one_run_record(scores: np.ndarray, included: np.ndarray, candidates: Sequence[tuple[int, int]],
                   delta: float, alpha: float) -> OneRunEpsilon:
    """The one-run metrics entry: each (k₊, k₋) candidate at α / len(candidates), the best
    reported (Bonferroni: it holds at 1 − α). A candidate that cannot certify ε > 0 keeps its
    correct count (its ε None) for the one-run f-DP bound; with no candidate certifying, the
    entry has no bound and records why."""
    s, unscorable = _scorable(np.asarray(scores, dtype=np.float64))
    each = alpha / len(candidates)
    found: list[tuple[GuessCandidate, OneRunBound | None]] = []
    reasons: list[str] = []
    for k_plus, k_minus in candidates:  # a handful of pairs fixed in advance
        try:
            bound = one_run_epsilon(s, included, k_plus, k_minus, delta, each)
        except ConfigError as exc:  # the design cannot certify ε > 0 (the pairs are valid)
            reasons.append(str(exc))
            found.append((GuessCandidate(k_plus, k_minus,
                                         correct_guesses(s, included, k_plus, k_minus), None),
                          None))
            continue
        found.append((GuessCandidate(k_plus, k_minus, bound.correct, bound.epsilon), bound))
    bounds = [b for _, b in found if b is not None]
    if not bounds:
        return OneRunEpsilon(None, reason=reasons[0])
    best = max(bounds, key=lambda b: b.epsilon)  # ties: the first candidate
    return OneRunEpsilon(best, tuple(c for c, _ in found), alpha, int(included.sum()),
                         unscorable)


@dataclass(frozen=True)
class EpsilonPlan:
    """What one target's bounds rest on, fixed before any attack is scored."""

    alpha: float
    delta: float
    delta_source: str
    claim: Claim | None
    seed: int  # split_halves seed of the audit samples
    audit: np.ndarray  # bool [N]
    members: np.ndarray  # bool [n_audit]
    halves: Halves | None
    why_not: str
    canary: np.ndarray | None = None  # bool [N]; None: no canaries
    included: np.ndarray | None = None  # bool [m]
    candidates: tuple[tuple[int, int], ...] = ()
    canary_alpha: float = 0.05
    canary_delta: float = 0.0
    canary_delta_source: str = ""
    canary_seed: int = 0
    canary_halves: Halves | None = None
    canary_why_not: str = ""
    membership: str = "unknown"  # who drew the audit samples' membership (MEMBERSHIP_SOURCES)

    @classmethod
    def of(cls, bank: SignalBank, target: int, metric_cfg: MetricsConfig, seed: int,
           target_privacy: Mapping[str, Any] | None = None,
           canaries: CanariesConfig | None = None, membership: str = "unknown") -> EpsilonPlan:
        """``membership``: "miaudit" when miaudit drew the audit samples' membership at
        random (a run's design), "user" when the user gave it (`miaudit audit`), "unknown"
        (a bare bank)."""
        if membership not in MEMBERSHIP_SOURCES:
            raise ValueError(f"membership must be one of {MEMBERSHIP_SOURCES}; got "
                             f"{membership!r}")
        claim = claim_of(target_privacy)
        delta, source = ((claim.delta, "the target's DP-SGD delta") if claim else
                         (metric_cfg.epsilon_delta, "metrics.epsilon_delta"))
        members = bank.membership[target][bank.audit]
        audit_seed = split_seed(seed, 0)
        halves, why_not = _halves(members, audit_seed, float(delta), metric_cfg.epsilon_alpha)
        plan = dict(alpha=metric_cfg.epsilon_alpha, delta=float(delta), delta_source=source,
                    claim=claim, seed=audit_seed, audit=bank.audit, members=members,
                    halves=halves, why_not=why_not, membership=membership)
        if bank.canary is None or not bank.canary.any():
            return cls(**plan)
        canaries = canaries or CanariesConfig()
        included = bank.membership[target][bank.canary]
        c_delta, c_source = ((canaries.delta, "canaries.delta") if canaries.delta is not None
                             else (delta, source))
        c_seed = split_seed(seed, 1)
        c_halves, c_why = _halves(included, c_seed, float(c_delta), canaries.alpha)
        return cls(**plan, canary=bank.canary, included=included,
                   candidates=tuple(resolve_guesses(canaries.guesses, int(included.size))),
                   canary_alpha=canaries.alpha, canary_delta=float(c_delta),
                   canary_delta_source=c_source, canary_seed=c_seed, canary_halves=c_halves,
                   canary_why_not=c_why)

    def bounds(self, scores: np.ndarray) -> dict[str, BoundRecord]:
        """One attack's bounds for its metrics (:meth:`AttackMetrics.with_bounds`), from its
        scores on every bank sample. The μ-GDP entries only at δ > 0: at δ = 0 a μ-GDP
        mechanism has no finite ε."""
        on = scores[self.audit]
        entries: dict[str, BoundRecord] = {EPSILON_LOWER_BOUND: threshold_record(
            on, self.members, self.halves, self.why_not)}
        if self.delta > 0:
            entries[GAUSSIAN_DP_LOWER_BOUND] = gaussian_dp_record(
                on, self.members, self.halves, self.why_not)
        if self.canary is not None and self.included is not None:
            on = scores[self.canary]
            entries[CANARY_EPSILON_LOWER_BOUND] = threshold_record(
                on, self.included, self.canary_halves, self.canary_why_not)
            if self.canary_delta > 0:
                entries[CANARY_GAUSSIAN_DP_LOWER_BOUND] = gaussian_dp_record(
                    on, self.included, self.canary_halves, self.canary_why_not)
            entries[ONE_RUN] = one_run_record(on, self.included, self.candidates,
                                              self.canary_delta, self.canary_alpha)
        return entries

    def keys(self) -> list[str]:
        """The metrics keys :meth:`bounds` fills, in its order."""
        keys = [EPSILON_LOWER_BOUND] + ([GAUSSIAN_DP_LOWER_BOUND] if self.delta > 0 else [])
        if self.canary is not None:
            keys.append(CANARY_EPSILON_LOWER_BOUND)
            keys += [CANARY_GAUSSIAN_DP_LOWER_BOUND] if self.canary_delta > 0 else []
            keys.append(ONE_RUN)
        return keys

    def no_bounds(self, reason: str) -> dict[str, BoundRecord]:
        """The entries of :meth:`bounds`, each without a bound and with ``reason`` (a
        model-free attack, which bounds nothing about the model)."""
        return {key: EPSILON_TYPES[key](None, reason=reason) for key in self.keys()}

    def settings(self, split_shifted: bool | None = None) -> PrivacySettings:
        """What the bounds rest on, for :func:`privacy_audit`. ``split_shifted``: the split
        check's finding (None: not checked; when True, :func:`privacy_audit` withholds a
        refutation)."""
        canaries = None
        if self.canary is not None and self.included is not None:
            canaries = CanarySettings(
                count=int(self.included.size), included=int(self.included.sum()),
                alpha=self.canary_alpha, delta=self.canary_delta,
                delta_source=self.canary_delta_source, split_seed=self.canary_seed,
                guesses=self.candidates)
        return PrivacySettings(claimed=self.claim, alpha=self.alpha, delta=self.delta,
                               delta_source=self.delta_source, split_seed=self.seed,
                               canaries=canaries, membership=self.membership,
                               split_shifted=split_shifted)
