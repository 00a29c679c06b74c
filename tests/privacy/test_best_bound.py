"""The best μ of a run with the one-run f-DP bound as a member of the μ family
(miaudit.privacy.best_bound; docs/algorithms.md §16): hand-made attack records, so that the
Bonferroni count and the recount at α / K can be checked exactly."""

from __future__ import annotations

import numpy as np
import pytest

from miaudit.privacy import (
    FDPOneRunBound,
    fdp_one_run_mu_from_counts,
    gaussian_dp_from_counts,
    one_run_epsilon_from_counts,
)
from miaudit.privacy.audit_record import BestBound, PrivacyAudit, PrivacySettings
from miaudit.privacy.best_bound import privacy_audit
from miaudit.records.outcomes import AttackMetrics, AttackOutcome
from miaudit.records.privacy import (
    CANARY_GAUSSIAN_DP_LOWER_BOUND,
    FDP_ONE_RUN,
    GuessCandidate,
    OneRunEpsilon,
    ThresholdGaussianDP,
)

ALPHA, DELTA, M = 0.05, 1e-5, 1000


def _outcome(name: str, correct: list[int | None], delta: float = DELTA,
             gdp_counts: tuple[int, int, int, int] = (200, 500, 200, 500)) -> AttackOutcome:
    """An attack with a canary μ-GDP threshold bound (counts fp, n0, fn, n1) and a one-run
    record of two (k₊, k₋) candidates, (50, 50) and (100, 100), with these correct counts."""
    pairs = [(50, 50), (100, 100)]
    alpha = ALPHA / len(pairs)
    best = one_run_epsilon_from_counts(M, 100, 60, delta, alpha)
    candidates = tuple(GuessCandidate(p, q, c, None) for (p, q), c in zip(pairs, correct,
                                                                         strict=True))
    fp, n0, fn, n1 = gdp_counts
    gdp = gaussian_dp_from_counts(fp, n0, fn, n1, DELTA, ALPHA, 0.5)
    metrics = AttackMetrics(auc=None, auc_ci=None, tpr=(),
                            canary_gaussian_dp_lower_bound=ThresholdGaussianDP(gdp),
                            one_run=OneRunEpsilon(best, candidates, ALPHA, 500))
    return AttackOutcome(name, np.zeros(1), metrics)


SETTINGS = PrivacySettings(claimed=None, alpha=ALPHA, delta=DELTA, delta_source="test",
                           split_seed=0)


def test_on_by_default_and_off_the_mu_family_is_the_threshold_bounds():
    outcome = _outcome("a", [100, 200])
    on = privacy_audit([outcome], SETTINGS)
    assert on == privacy_audit([outcome], SETTINGS, fdp_one_run=True)
    assert on.mu_bounds_compared == 1 + 2  # the threshold μ bound and both candidates
    off = privacy_audit([outcome], SETTINGS, fdp_one_run=False)
    assert off.mu_bounds_compared == 1
    assert off.best_mu is not None and off.best_mu.kind == CANARY_GAUSSIAN_DP_LOWER_BOUND


def test_an_fdp_best_mu_is_read_back_as_one():
    audit = privacy_audit([_outcome("a", [100, 200])], SETTINGS)
    best = audit.best_mu
    assert best is not None and best.kind == FDP_ONE_RUN
    assert isinstance(best.bound, FDPOneRunBound)
    data = best.to_dict()
    assert data["bound"] == FDP_ONE_RUN and data["method"] == "one-run f-dp gaussian"
    again = BestBound.from_dict(data)
    assert again == best and isinstance(again.bound, FDPOneRunBound)
    assert again.to_dict() == data and list(again.to_dict()) == list(data)  # key order too
    assert again.mu == best.mu and again.epsilon == best.epsilon
    # the whole audit too, as summary.json's privacy_audit (with its line) is read back
    assert PrivacyAudit.from_dict({**audit.to_dict(), "line": "ignored"}) == audit


def test_each_candidate_is_a_test_and_the_best_is_recounted_at_alpha_over_k():
    outcomes = [_outcome("weak", [60, 120]), _outcome("strong", [100, 195])]
    audit = privacy_audit(outcomes, SETTINGS, fdp_one_run=True)
    k = 2 + 4  # two threshold μ bounds, two candidates per attack
    assert audit.mu_bounds_compared == k and audit.bounds_compared == 4  # ε's K unchanged
    best = audit.best_mu
    assert best is not None and (best.attack, best.kind) == ("strong", FDP_ONE_RUN)
    want = max((fdp_one_run_mu_from_counts(M, r, v, DELTA, ALPHA / k) for r, v in
                [(100, 100), (200, 195)]), key=lambda b: b.mu)
    assert best.mu == want.mu and best.epsilon == want.epsilon and best.bound.alpha == ALPHA / k
    assert (best.bound.k_plus, best.bound.k_minus) == (want.guesses // 2, want.guesses // 2)
    assert best.family_alpha == ALPHA and best.to_dict()["bound"] == FDP_ONE_RUN
    # a stronger threshold bound wins instead (ties and all go to the threshold bounds first)
    sharp = _outcome("sharp", [60, 120], gdp_counts=(1, 500, 1, 500))
    audit = privacy_audit([*outcomes, sharp], SETTINGS, fdp_one_run=True)
    assert audit.best_mu is not None and audit.best_mu.attack == "sharp"
    assert audit.best_mu.kind == CANARY_GAUSSIAN_DP_LOWER_BOUND


@pytest.mark.parametrize("delta,correct,k", [(0.0, [100, 195], 1), (DELTA, [None, 195], 3)])
def test_a_pure_record_adds_nothing_and_an_unrecorded_count_still_counts(delta, correct, k):
    audit = privacy_audit([_outcome("a", correct, delta=delta)], SETTINGS, fdp_one_run=True)
    assert audit.mu_bounds_compared == k
    if delta > 0:  # the (100, 100) candidate alone, recounted at α / 3
        assert audit.best_mu is not None and audit.best_mu.kind == FDP_ONE_RUN
        assert audit.best_mu.mu == fdp_one_run_mu_from_counts(M, 200, 195, DELTA, ALPHA / 3).mu
