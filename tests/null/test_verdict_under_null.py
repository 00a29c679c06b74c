"""The verdict and the privacy bounds under the null: an audit with nothing to find says
"Exposed" or "Warning sign", or certifies ε > 0, no more often than their family-wise α,
however many correlated attacks it chose the strongest from (docs/algorithms.md §13)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from miaudit import metrics
from miaudit.attacks import get_attack
from miaudit.null_calibration import classifier_bank, runnable
from miaudit.pipeline.evaluate import evaluate_bank
from miaudit.records.outcomes import AttackOutcome, AuditResult
from miaudit.verdict.strength import assess

ALPHA = 0.05
LEAK_LEVELS = ("exposed", "average-case")


def _most_allowed(trials: int, alpha: float = ALPHA) -> int:
    """The most false alarms a level-α procedure gives in ``trials`` null audits, but for a
    one-in-a-thousand bad draw (the seeds are fixed: the test is deterministic)."""
    return int(stats.binom.ppf(0.999, trials, alpha))


def _null_result(seed: int, n_attacks: int = 25, n: int = 1200) -> AuditResult:
    """25 correlated attacks' scores (a shared part and each its own) on samples whose
    membership is a coin flip: the shuffled-membership bank of the issue, where the scores
    are what they are and membership is drawn at random among the audit rows."""
    rng = np.random.default_rng([seed, 33])
    members = rng.random(n) < 0.5
    shared = rng.normal(size=n)
    outcomes = []
    for a in range(n_attacks):
        weight = 0.3 + 0.65 * a / n_attacks  # from nearly independent to nearly the same
        scores = weight * shared + np.sqrt(1 - weight**2) * rng.normal(size=n)
        if a % 5 == 0:
            scores = np.round(scores, 1)  # ties, as count-based scores have
        outcomes.append(AttackOutcome.from_dicts(
            f"attack-{a}", scores, metrics.evaluate(scores, members, fprs=(0.001, 0.01, 0.1),
                                                    n_bootstrap=200, seed=seed)))
    return AuditResult(np.arange(n), members, outcomes,
                       meta={"config": {"metrics": {"confidence": 1 - ALPHA}}})


def test_the_verdict_picks_the_strongest_of_25_attacks_at_its_alpha():
    trials = 200
    levels = [assess(_null_result(seed)).measured for seed in range(trials)]
    alarms = sum(level in LEAK_LEVELS for level in levels)
    assert alarms <= _most_allowed(trials), levels


def test_without_the_correction_the_same_audits_would_cry_wolf():
    """What the correction is for: the strongest of 25 attacks' uncorrected intervals lie
    above chance far more often than α (the defect the verdict had)."""
    uncorrected = 0
    for seed in range(60):
        result = _null_result(seed)
        aucs = [o.metrics.auc_ci for o in result.outcomes]
        uncorrected += any(ci[0] > 0.5 for ci in aucs)
    assert uncorrected > 60 * ALPHA * 2


def test_null_audits_of_every_design_find_no_leak_and_certify_no_epsilon():
    """Real pipeline evaluations (`evaluate_bank`: metrics, bounds, checks) of null banks of
    every design a run draws, with every attack that needs no scorer: the verdict's level and
    the best ε bound (Bonferroni over the attacks) stay at their α."""
    trials, alarms, certified, dependent = 0, 0, 0, 0
    for seed in range(6):
        for design in ("offline", "offline-canaries", "online", "paired-halves", "lira-keep"):
            null = classifier_bank(design, "unseen-members", n_models=6, seed=seed)
            names = [a for a in runnable(null) if "epochs" not in get_attack(a).defaults
                     and a not in ("qmia", "qmia-label")]  # scorers: tests/null's other file
            result = evaluate_bank(null.bank, null.target, names, progress=False, seed=seed)
            found = assess(result)
            trials += 1
            alarms += found.measured in LEAK_LEVELS
            best = result.meta["privacy_audit"].best
            certified += bool(best is not None and best.bound.epsilon > 0)
            dependent += result.meta["checks"]["design"]["dependent"]
    assert alarms <= _most_allowed(trials)
    assert certified <= _most_allowed(trials)
    assert dependent == 0
