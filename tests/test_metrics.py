"""Tests of miaudit.metrics against scikit-learn and hand-computed examples."""

from __future__ import annotations

import json
import math
import time
from statistics import NormalDist

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from miaudit import metrics
from miaudit.errors import AttackError, MiauditError


def _data(n: int, seed: int, ties: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    members = rng.random(n) < 0.4
    scores = rng.normal(size=n) + 0.5 * members
    if ties is not None:
        scores = np.round(scores * ties) / ties
    return scores, members


@pytest.mark.parametrize("ties", [None, 10, 1])
@pytest.mark.parametrize("seed", [0, 1])
def test_roc_and_auc_match_sklearn(ties: int | None, seed: int) -> None:
    scores, members = _data(3000, seed, ties)
    fpr, tpr, thr = metrics.roc(scores, members)
    ref_fpr, ref_tpr, ref_thr = roc_curve(members, scores, drop_intermediate=False)
    np.testing.assert_array_equal(fpr, ref_fpr)
    np.testing.assert_array_equal(tpr, ref_tpr)
    np.testing.assert_array_equal(thr, ref_thr)
    assert abs(metrics.auc(scores, members) - roc_auc_score(members, scores)) < 1e-12
    result = metrics.evaluate(scores, members, n_bootstrap=0)
    assert abs(result["auc"] - roc_auc_score(members, scores)) < 1e-12


def test_auc_on_binary_scores_counts_ties_half() -> None:
    scores = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    members = np.array([1, 0, 1, 1, 0, 0])
    # 9 (member, non-member) pairs: 1 vs 0: 2*2 = 4 wins; ties 1 vs 1: 2*1, 0 vs 0: 1*2
    assert metrics.auc(scores, members) == pytest.approx((4 + 0.5 * 4) / 9, abs=1e-15)
    assert metrics.auc(scores, members) == pytest.approx(roc_auc_score(members, scores))


def test_tpr_at_fpr_hand_examples() -> None:
    fpr = np.array([0.0, 0.005, 0.02, 1.0])
    tpr = np.array([0.0, 0.3, 0.5, 1.0])
    assert metrics.tpr_at_fpr(fpr, tpr, 0.01) == 0.3  # no interpolation towards 0.02
    assert metrics.tpr_at_fpr(fpr, tpr, 0.02) == 0.5  # FPR == target is allowed
    assert metrics.tpr_at_fpr(fpr, tpr, 0.001) == 0.0
    # the largest TPR with FPR <= f is not the last qualifying point (points not monotone)
    fpr = np.array([0.0, 0.004, 0.008, 0.5, 1.0])
    tpr = np.array([0.0, 0.6, 0.2, 0.9, 1.0])
    assert metrics.tpr_at_fpr(fpr, tpr, 0.01) == 0.6
    assert metrics.tpr_at_fpr([0.5, 1.0], [0.5, 1.0], 0.1) == 0.0  # nothing qualifies


def test_tpr_at_fpr_exact_boundary_on_real_roc() -> None:
    # 1000 non-members: one false positive is FPR 0.001 exactly and must count
    members = np.r_[np.ones(10, bool), np.zeros(1000, bool)]
    scores = np.r_[np.arange(10) + 100.0, np.arange(1000.0) / 1000]
    scores[-1] = 104.5  # one non-member above five members
    fpr, tpr, _ = metrics.roc(scores, members)
    assert metrics.tpr_at_fpr(fpr, tpr, 0.001) == 1.0  # all 10 members at 1 false positive
    assert metrics.tpr_at_fpr(fpr, tpr, 0.0009) == 0.5
    assert metrics.evaluate(scores, members, n_bootstrap=0)["tpr_at_fpr"]["0.001"] == 1.0


def test_nan_scores_rank_lowest_and_are_counted() -> None:
    scores = np.array([np.nan, 0.1, 0.9, np.nan, -5.0])
    members = np.array([1, 0, 1, 0, 0])
    fpr, tpr, thr = metrics.roc(scores, members)
    np.testing.assert_array_equal(thr, [np.inf, 0.9, 0.1, -5.0, -np.inf])
    np.testing.assert_array_equal(fpr, [0, 0, 1 / 3, 2 / 3, 1])
    np.testing.assert_array_equal(tpr, [0, 0.5, 0.5, 0.5, 1])
    replaced = np.where(np.isnan(scores), -1e9, scores)  # NaN = below everything, tied
    assert metrics.auc(scores, members) == pytest.approx(roc_auc_score(members, replaced))
    result = metrics.evaluate(scores, members, n_bootstrap=20)
    assert result["n_unscorable"] == 2
    assert result["n_members"] + result["n_nonmembers"] == 5  # nothing dropped
    assert result["auc"] == pytest.approx(roc_auc_score(members, replaced))


def test_nan_member_is_a_missed_detection() -> None:
    members = np.array([1, 1, 0, 0])
    assert metrics.auc([np.nan, 2.0, 1.0, 0.0], members) == 0.5
    assert metrics.auc([3.0, 2.0, 1.0, 0.0], members) == 1.0


@pytest.mark.parametrize("fpr", [0.001, 0.003, 0.01, 0.05, 0.1])
def test_support_warning_exactly_below_ten_expected_false_positives(fpr: float) -> None:
    threshold = math.ceil(10 / fpr - 1e-9)  # smallest n with n * fpr >= 10
    assert metrics.support_warning(threshold, fpr) is None
    text = metrics.support_warning(threshold - 1, fpr)
    assert text is not None and f"n={threshold - 1:,} non-members" in text
    assert f"TPR@{fpr * 100:g}% FPR" in text


def test_evaluate_warning_field() -> None:
    rng = np.random.default_rng(3)
    for n0, expect in ((9999, True), (10000, False)):
        members = np.r_[np.ones(50, bool), np.zeros(n0, bool)]
        scores = rng.normal(size=members.size)
        support = metrics.evaluate(scores, members, n_bootstrap=0)["fpr_support"]
        assert (support["0.001"]["warning"] is not None) == expect
        assert support["0.001"]["n_nonmembers"] == n0
        assert support["0.001"]["expected_false_positives"] == pytest.approx(n0 * 0.001)
        assert support["0.01"]["warning"] is None
        assert "9,999" in (support["0.001"]["warning"] or "9,999")


def _explicit_resamples(scores, members, fprs, n: int, seed: int):
    """The naive stratified bootstrap: resample each class with replacement, recompute."""
    rng = np.random.default_rng(seed)
    idx1, idx0 = np.flatnonzero(members), np.flatnonzero(~members)
    aucs, tprs = np.empty(n), np.empty((n, len(fprs)))
    for b in range(n):
        idx = np.r_[rng.choice(idx1, idx1.size), rng.choice(idx0, idx0.size)]
        s, m = scores[idx], members[idx]
        aucs[b] = metrics.auc(s, m)
        fpr, tpr, _ = metrics.roc(s, m)
        tprs[b] = [metrics.tpr_at_fpr(fpr, tpr, f) for f in fprs]
    return aucs, tprs


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov distance."""
    grid = np.union1d(a, b)
    cdf = [np.searchsorted(np.sort(x), grid, side="right") / x.size for x in (a, b)]
    return float(np.abs(cdf[0] - cdf[1]).max())


@pytest.mark.parametrize("fprs", [(0.01, 0.05, 0.2), (0.001, 1.0)])
def test_bootstrap_tpr_has_the_distribution_of_explicit_resamples(fprs) -> None:
    """Two draws per resample (Beta order statistic, binomial) give the distribution of
    resampling the samples and recomputing TPR@FPR, ties and unscorable samples included."""
    scores, members = _data(600, 5, ties=8)
    scores[:9] = np.nan
    n = 3000
    _, naive = _explicit_resamples(scores, members, fprs, n, seed=1)
    gid, mo, _ = metrics._sorted(*metrics._check(scores, members))
    fast = metrics._bootstrap_tpr(gid, mo, fprs, n, seed=2)
    for j in range(len(fprs)):
        # KS critical distance at alpha ~ 0.001 for two samples of n (conservative: discrete)
        assert _ks(naive[:, j], fast[:, j]) < 1.95 * math.sqrt(2 / n)
        assert fast[:, j].mean() == pytest.approx(naive[:, j].mean(), abs=0.01)
        assert fast[:, j].std() == pytest.approx(naive[:, j].std(), rel=0.1, abs=1e-3)


def testfalse_positive_allowance_follows_the_roc_rule() -> None:
    for n0 in (1, 7, 1000, 9999, 100_000):
        for f in (0.001, 0.01, 0.1, 0.3, 1.0):
            k = metrics.false_positive_allowance(n0, f)
            assert k / n0 <= f and (k == n0 or (k + 1) / n0 > f)


def test_auc_interval_is_delong_on_the_logit_scale() -> None:
    scores, members = _data(400, 3, ties=5)
    scores[:4] = np.nan
    s1 = np.where(np.isnan(scores), -np.inf, scores)
    pos, neg = s1[members], s1[~members]
    h = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])  # naive O(n1 n0)
    v10, v01 = h.mean(axis=1), h.mean(axis=0)
    area = h.mean()
    se = math.sqrt(v10.var(ddof=1) / pos.size + v01.var(ddof=1) / neg.size)
    z = 1.959963984540054
    logit, half = math.log(area / (1 - area)), z * se / (area * (1 - area))
    expected = [1 / (1 + math.exp(-(logit - half))), 1 / (1 + math.exp(-(logit + half)))]
    result = metrics.evaluate(scores, members, n_bootstrap=1)
    assert result["auc"] == pytest.approx(area, abs=1e-12)
    assert result["auc_ci"] == pytest.approx(expected, abs=1e-12)


def test_auc_interval_spread_matches_the_bootstrap() -> None:
    scores, members = _data(800, 6)
    aucs, _ = _explicit_resamples(scores, members, (0.1,), 2000, seed=0)
    lo, hi = metrics.evaluate(scores, members)["auc_ci"]
    naive_lo, naive_hi = np.quantile(aucs, [0.025, 0.975])
    assert hi - lo == pytest.approx(naive_hi - naive_lo, rel=0.12)
    assert lo == pytest.approx(naive_lo, abs=0.01) and hi == pytest.approx(naive_hi, abs=0.01)


@pytest.mark.parametrize("n1, n0, shift, fpr", [(1000, 1000, 1.0, 0.05), (500, 4000, 2.0, 0.01)])
def test_intervals_cover_the_true_values(n1: int, n0: int, shift: float, fpr: float) -> None:
    """Coverage of the 95% intervals over 300 binormal data sets with known AUC and TPR@FPR."""
    normal = NormalDist()
    true_auc = normal.cdf(shift / math.sqrt(2))
    true_tpr = 1 - normal.cdf(normal.inv_cdf(1 - fpr) - shift)
    rng = np.random.default_rng(0)
    members = np.r_[np.ones(n1, bool), np.zeros(n0, bool)]
    hits = np.zeros(2)
    reps = 300
    for rep in range(reps):
        scores = np.r_[rng.normal(shift, 1, n1), rng.normal(0, 1, n0)]
        res = metrics.evaluate(scores, members, fprs=(fpr,), seed=rep)
        for i, (ci, truth) in enumerate(((res["auc_ci"], true_auc),
                                         (res["tpr_at_fpr_ci"][repr(fpr)], true_tpr))):
            hits[i] += ci[0] <= truth <= ci[1]
    # 95% nominal; 300 repetitions put the observed share within ~0.03 of the true coverage
    assert np.all(hits / reps >= 0.9) and np.all(hits / reps <= 0.99)


def test_intervals_known_answers() -> None:
    members = np.r_[np.ones(50, bool), np.zeros(50, bool)]
    perfect = metrics.evaluate(np.r_[np.ones(50), np.zeros(50)], members)
    assert perfect["auc_ci"] == [1.0, 1.0]
    assert perfect["tpr_at_fpr_ci"] == {"0.001": [1.0, 1.0], "0.01": [1.0, 1.0]}
    tied = metrics.evaluate(np.zeros(100), members)
    assert tied["auc"] == 0.5 and tied["auc_ci"] == [0.5, 0.5]
    assert tied["tpr_at_fpr_ci"] == {"0.001": [0.0, 0.0], "0.01": [0.0, 0.0]}
    everyone = metrics.evaluate(np.zeros(100), members, fprs=(1.0,))
    assert everyone["tpr_at_fpr_ci"] == {"1.0": [1.0, 1.0]}


def test_bootstrap_ci_contains_estimate_and_is_seeded() -> None:
    scores, members = _data(8000, 2)
    a = metrics.evaluate(scores, members, seed=7)
    b = metrics.evaluate(scores, members, seed=7)
    c = metrics.evaluate(scores, members, seed=8)
    assert a == b
    assert a["tpr_at_fpr_ci"] != c["tpr_at_fpr_ci"]  # seeded: the bootstrap's draws
    assert a["auc_ci"] == c["auc_ci"]  # DeLong's: no random draws
    lo, hi = a["auc_ci"]
    assert lo < a["auc"] < hi and hi - lo < 0.05
    for key in ("0.001", "0.01"):
        lo, hi = a["tpr_at_fpr_ci"][key]
        assert lo <= a["tpr_at_fpr"][key] <= hi
    json.dumps(a, allow_nan=False)  # JSON-serialisable, strict


def test_bootstrap_keeps_both_classes_with_few_members() -> None:
    members = np.r_[np.ones(2, bool), np.zeros(200, bool)]
    scores = np.r_[[5.0, -5.0], np.zeros(200)]
    result = metrics.evaluate(scores, members, n_bootstrap=100)
    assert all(math.isfinite(v) for v in result["auc_ci"])


def test_bootstrap_is_fast() -> None:
    scores, members = _data(20000, 4)
    metrics.evaluate(scores[:100], members[:100])  # warm up
    start = time.perf_counter()
    metrics.evaluate(scores, members, n_bootstrap=200)
    assert time.perf_counter() - start < 1.0  # ~5 ms on an idle core; loose for busy CI


def test_best_accuracy_threshold_and_balanced_accuracy_hand_example() -> None:
    scores = np.array([0.1, 0.4, 0.35, 0.8])
    members = np.array([0, 0, 1, 1])
    # accuracies: nobody 2/4, >=0.6 3/4, >=0.375 2/4, >=0.225 3/4, all 2/4; tie -> highest
    tau = metrics.best_accuracy_threshold(scores, members)
    assert tau == pytest.approx(0.6)
    assert metrics.balanced_accuracy(scores, members, tau) == 0.75
    assert metrics.balanced_accuracy(scores, members, 0.35) == 0.75  # >=: 0.35 is a member
    assert metrics.balanced_accuracy(scores, members, 0.36) == 0.5
    assert (
        metrics.evaluate(scores, members, threshold=tau, n_bootstrap=0)["balanced_accuracy"] == 0.75
    )
    assert metrics.evaluate(scores, members, n_bootstrap=0)["balanced_accuracy"] is None


def test_best_accuracy_threshold_edges_and_nan() -> None:
    # perfect separation at a midpoint
    assert metrics.best_accuracy_threshold([0.0, 1.0, 2.0, 3.0], [0, 0, 1, 1]) == 1.5
    # binary scores (correctness): midpoint between 0 and 1
    assert metrics.best_accuracy_threshold([1, 1, 1, 0, 1, 0], [1, 1, 1, 0, 0, 0]) == 0.5
    # mostly non-members and no signal: predicting nobody is best
    tau = metrics.best_accuracy_threshold([0.5, 0.5, 0.5, 0.5], [1, 0, 0, 0])
    assert tau > 0.5 and metrics.balanced_accuracy([0.5] * 4, [1, 0, 0, 0], tau) == 0.5
    # NaN is never predicted member
    assert metrics.balanced_accuracy([np.nan, 0.0], [1, 0], 0.5) == 0.5
    assert metrics.balanced_accuracy([np.nan, 0.0], [1, 0], -np.inf) == 0.0


def test_precision_at_recall_hand_example() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    members = np.array([1, 0, 1, 1, 0])
    assert metrics.precision_at_recall(scores, members, 0.5) == pytest.approx(2 / 3)
    assert metrics.precision_at_recall(scores, members, 1 / 3) == 1.0
    assert metrics.precision_at_recall(scores, members, 1.0) == 0.75
    assert metrics.precision_at_recall([0.9, 0.9, 0.5, 0.5], [1, 0, 1, 0], 0.5) == 0.5
    result = metrics.evaluate(scores, members, n_bootstrap=0, recalls=(0.5, 1.0))
    assert result["precision_at_recall"] == {"0.5": pytest.approx(2 / 3), "1.0": 0.75}


def test_evaluate_keys() -> None:
    scores, members = _data(500, 9)
    result = metrics.evaluate(scores, members, n_bootstrap=10, threshold=0.2)
    assert set(result) == {
        "auc",
        "auc_ci",
        "tpr_at_fpr",
        "tpr_at_fpr_ci",
        "fpr_support",
        "n_members",
        "n_nonmembers",
        "n_unscorable",
        "precision_at_recall",
        "balanced_accuracy",
        "threshold",
    }
    assert list(result["tpr_at_fpr"]) == ["0.001", "0.01"]
    assert list(result["precision_at_recall"]) == ["0.5", "0.9"]
    assert result["threshold"] == 0.2
    assert metrics.evaluate(scores, members, n_bootstrap=0)["auc_ci"] is None


@pytest.mark.parametrize(
    ("scores", "members", "match"),
    [
        ([0.1, 0.2, 0.3], [1, 0], "differ in length"),
        ([0.1, 0.2], [1, 1], "no non-members"),
        ([0.1, 0.2], [0, 0], "no members"),
        ([[0.1, 0.2]], [[1, 0]], "1-D"),
        ([0.1, 0.2], [2, 0], "0/1"),
        (["a", "b"], [1, 0], "numeric"),
    ],
)
def test_bad_input_raises_clear_error(scores, members, match: str) -> None:
    with pytest.raises(AttackError, match=match) as info:
        metrics.evaluate(scores, members)
    assert isinstance(info.value, MiauditError)


def test_bad_parameters_raise() -> None:
    scores, members = [0.1, 0.2, 0.3], [1, 0, 1]
    with pytest.raises(AttackError, match="recall"):
        metrics.precision_at_recall(scores, members, 0.0)
    with pytest.raises(AttackError, match="FPR"):
        metrics.evaluate(scores, members, fprs=(0.0,))
    with pytest.raises(AttackError, match="confidence"):
        metrics.evaluate(scores, members, confidence=1.5)


def test_support_warning_says_one_false_positive_in_the_singular() -> None:
    assert "rests on 1 expected false positive (n=1,000" in metrics.support_warning(1000, 0.001)
    assert "rests on 2 expected false positives" in metrics.support_warning(2000, 0.001)
