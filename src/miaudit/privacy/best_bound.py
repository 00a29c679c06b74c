"""The best privacy bound of a run (docs/algorithms.md §16): every attack's bounds recounted at
α / K over the K bounds compared (Bonferroni), so that the best holds at 1 − α, what it says of
the target's claim, and the best μ-GDP bound the same way over the μ bounds (by default the
one-run f-DP bound of Mahloujifar, Melis & Chaudhuri 2025, "Auditing f-Differential Privacy in
One Run", on each (k₊, k₋) candidate's counts is a member of the μ family too: it is a μ-GDP
bound, and on canaries it is often far tighter than the threshold μ bounds).

:func:`privacy_audit` reads only the attacks' typed metrics, so a caller can call it again
after adding outcomes (a run's forgetting attacks); it returns a
:class:`~miaudit.privacy.audit_record.PrivacyAudit`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from miaudit.errors import ConfigError
from miaudit.privacy import (
    OneRunBound,
    epsilon_from_counts,
    fdp_one_run_mu_from_counts,
    gaussian_dp_from_counts,
    mu_array,
    one_run_epsilon_from_counts,
)
from miaudit.privacy.audit_record import BestBound, PrivacyAudit, PrivacySettings, claim_finding
from miaudit.records.outcomes import AttackOutcome
from miaudit.records.privacy import (
    CANARY_EPSILON_LOWER_BOUND,
    CANARY_GAUSSIAN_DP_LOWER_BOUND,
    EPSILON_LOWER_BOUND,
    FDP_ONE_RUN,
    GAUSSIAN_DP_LOWER_BOUND,
    ONE_RUN,
    GuessCandidate,
)

__all__ = ["FDP_ONE_RUN", "privacy_audit"]


def _tests(outcome: AttackOutcome) -> int:
    """How many tests the bounds of ``outcome`` are: one per threshold bound, one per
    (k₊, k₋) candidate of its one-run bound."""
    m = outcome.metrics
    records = (m.epsilon_lower_bound, m.canary_epsilon_lower_bound)
    n = sum(1 for r in records if r is not None and r.bound is not None)
    if m.one_run is not None and m.one_run.bound is not None:
        n += len(m.one_run.candidates)
    return n


def _recounted(outcome: AttackOutcome, alpha: float, family_alpha: float
               ) -> list[BestBound | None]:  # fmt: skip
    """Each bound of ``outcome`` recomputed at ``alpha`` from its counts (τ stays the one its
    selection half chose; k₊, k₋ stay fixed); None for a one-run bound no candidate of which
    can certify ε > 0 at that α."""
    found: list[BestBound | None] = []
    m = outcome.metrics
    for key in (EPSILON_LOWER_BOUND, CANARY_EPSILON_LOWER_BOUND):
        record = m.epsilon_lower_bound if key == EPSILON_LOWER_BOUND else (
            m.canary_epsilon_lower_bound)
        if record is None or record.bound is None:
            continue
        b = record.bound
        again = epsilon_from_counts(b.fp, b.n_nonmembers, b.fn, b.n_members, b.delta, alpha,
                                    b.threshold)
        found.append(BestBound(again, outcome.name, key, family_alpha))
    one = m.one_run
    if one is not None and one.bound is not None:
        run, best = one.bound, None
        for c in one.candidates:
            # no ε at the record's α: none at the stricter α / K either (its count, recorded
            # since the f-DP bound, is for the μ family only)
            if c.correct is None or c.epsilon is None:
                continue
            try:
                again_run = one_run_epsilon_from_counts(run.m, c.k_plus + c.k_minus, c.correct,
                                                        run.delta, alpha)
            except ConfigError:  # this pair cannot certify ε > 0 at the stricter α
                continue
            if best is None or again_run.epsilon > best.epsilon:
                best = BestBound(dataclasses.replace(again_run, k_plus=c.k_plus,
                                                     k_minus=c.k_minus),
                                 outcome.name, ONE_RUN, family_alpha)
        found.append(best)
    return found


def _best_mu(outcomes: Sequence[AttackOutcome], alpha: float, fdp_one_run: bool = True
             ) -> tuple[int, BestBound | None]:  # fmt: skip
    """The number K of μ-GDP bounds and the largest, each recounted at α / K from its counts
    (τ as its selection half chose it), so that it holds at 1 − α: the ε rule of
    :func:`privacy_audit` applied to μ. With ``fdp_one_run``, each (k₊, k₋) candidate of a
    one-run record at δ > 0 is one more test, its f-DP bound computed from its counts at
    α / K (a candidate whose count was not recorded still counts, and gives nothing). Ties:
    the first (threshold bounds before f-DP ones)."""
    found = []
    for o in outcomes:
        for key in (GAUSSIAN_DP_LOWER_BOUND, CANARY_GAUSSIAN_DP_LOWER_BOUND):
            record = (o.metrics.gaussian_dp_lower_bound if key == GAUSSIAN_DP_LOWER_BOUND
                      else o.metrics.canary_gaussian_dp_lower_bound)
            if record is not None and record.bound is not None:
                found.append((o.name, key, record.bound))
    # (attack, its one-run bound, a candidate): the f-DP members
    guesses: list[tuple[str, OneRunBound, GuessCandidate]] = []
    if fdp_one_run:
        for o in outcomes:
            one = o.metrics.one_run
            if one is not None and one.bound is not None and one.bound.delta > 0.0:
                guesses.extend((o.name, one.bound, c) for c in one.candidates)
    k = len(found) + len(guesses)
    if not k:
        return 0, None
    mus = [float(mu_array(b.fp, b.n_nonmembers, b.fn, b.n_members, alpha / k))
           for _, _, b in found]
    best: BestBound | None = None
    top = -1.0  # the best μ so far
    if found:
        j = int(np.argmax(mus))
        name, key, b = found[j]
        # only the best's ε (a root search) is computed
        again = gaussian_dp_from_counts(b.fp, b.n_nonmembers, b.fn, b.n_members, b.delta,
                                        alpha / k, b.threshold)
        best, top = BestBound(again, name, key, alpha), mus[j]
    for name, run, c in guesses:
        if c.correct is None:
            continue
        fdp = fdp_one_run_mu_from_counts(run.m, c.k_plus + c.k_minus, c.correct, run.delta,
                                         alpha / k)
        if fdp.mu > top:
            best = BestBound(dataclasses.replace(fdp, k_plus=c.k_plus, k_minus=c.k_minus),
                             name, FDP_ONE_RUN, alpha)
            top = fdp.mu
    return k, best


def privacy_audit(outcomes: Sequence[AttackOutcome], settings: PrivacySettings | PrivacyAudit,
                  fdp_one_run: bool = True) -> PrivacyAudit:
    """``settings`` (an :meth:`EpsilonPlan.settings`, or the settings of a previous result of
    this function) with the best bound of all ``outcomes``: each of the K tests (a threshold
    bound is one; a one-run bound one per (k₊, k₋) candidate) recounted at α / K, the
    largest kept, so it holds at 1 − α (union bound); and what it says of the target's claim
    (:func:`~miaudit.privacy.audit_record.claim_finding`: ``exceeds_claim``, above it at a δ
    no smaller than the claim's; ``refutes_claim``, above it with a proof and no shifted
    split). Then the best μ-GDP bound (``best_mu``), the same rule over the
    ``mu_bounds_compared`` μ bounds: a family of its own, so each best holds at 1 − α on its
    own (both together at 1 − 2α); its ε is an estimate and refutes nothing. With
    ``fdp_one_run`` (the default), the μ family also counts every (k₊, k₋) candidate of each
    one-run record at δ > 0 as a test and offers its one-run f-DP bound (Mahloujifar, Melis &
    Chaudhuri 2025; kind :data:`~miaudit.records.privacy.FDP_ONE_RUN`, which the report words
    and :class:`~miaudit.privacy.audit_record.BestBound` reads back); ``False`` gives the μ
    family of runs before it (the threshold μ bounds alone). Model-free attacks have no
    bounds (``MODEL_FREE_REASON``), so they never count here."""
    if isinstance(settings, PrivacyAudit):
        settings = settings.settings
    alpha = float(settings.alpha)
    k = sum(_tests(o) for o in outcomes)
    best: BestBound | None = None
    if k:
        for bound in (b for o in outcomes for b in _recounted(o, alpha / k, alpha)):
            if bound is not None and (best is None or bound.epsilon > best.epsilon):
                best = bound
    k_mu, best_mu = _best_mu(outcomes, alpha, fdp_one_run)
    return PrivacyAudit(settings, bounds_compared=k, best=best,
                        claim_finding=claim_finding(settings, best),
                        mu_bounds_compared=k_mu, best_mu=best_mu)
