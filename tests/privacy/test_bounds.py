"""The threshold-attack ε lower bound (miaudit.privacy.bounds; docs/algorithms.md §16), checked
against mechanisms whose ε is known exactly (tests/privacy/dp_mechanisms.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_mechanisms import (
    allowed_rate,
    flags,
    gaussian_epsilon,
    gaussian_mechanism,
    randomized_response,
)
from scipy import stats

from miaudit.errors import ConfigError
from miaudit.privacy import (
    choose_threshold,
    clopper_pearson_upper,
    epsilon_array,
    epsilon_from_counts,
    epsilon_lower_bound,
    split_halves,
)

ALPHA = 0.05


def _bounds(rng: np.random.Generator, release, n: int, reps: int, **kw) -> np.ndarray:
    """The whole rule on ``reps`` fresh selection and counting sets of n members + n others."""
    m = flags(n, n)
    return np.array([epsilon_lower_bound(release(rng, m), m, release(rng, m), m, **kw).epsilon
                     for _ in range(reps)])


# --- the formula ------------------------------------------------------------------------------

def test_clopper_pearson_upper_is_the_exact_binomial_quantile():
    n, k = 50, np.arange(50)
    upper = clopper_pearson_upper(k, n, 0.975)
    # by definition P[Binomial(n, p⁺) ≤ k] = 1 − level
    np.testing.assert_allclose(stats.binom.cdf(k, n, upper), 0.025, rtol=1e-6)
    assert np.all(np.diff(upper) > 0)
    assert clopper_pearson_upper(0, 20, 0.975) == pytest.approx(1 - 0.025 ** (1 / 20))
    assert clopper_pearson_upper(n, n, 0.975) == 1.0
    assert isinstance(clopper_pearson_upper(3, 10, 0.9), float)


def test_epsilon_from_counts_is_the_formula():
    delta = 1e-3
    b = epsilon_from_counts(fp=30, n0=1000, fn=400, n1=900, delta=delta, alpha=ALPHA)
    fpr, fnr = stats.beta.ppf(0.975, 31, 970), stats.beta.ppf(0.975, 401, 500)
    want = max(0.0, math.log((1 - delta - fnr) / fpr), math.log((1 - delta - fpr) / fnr))
    assert b.epsilon == pytest.approx(want, rel=1e-12)
    assert (b.fpr_upper, b.fnr_upper) == pytest.approx((fpr, fnr), rel=1e-12)
    assert (b.n_members, b.n_nonmembers, b.fp, b.fn, b.threshold) == (900, 1000, 30, 400, None)
    d = b.to_dict()
    assert list(d) == ["epsilon", "method", "alpha", "delta", "n_members", "n_nonmembers", "fp",
                       "fn", "fpr_upper", "fnr_upper", "threshold"]
    assert d["method"] == "clopper-pearson threshold" and json.loads(json.dumps(d)) == d
    # the reversed attack (second term) certifies the same
    assert epsilon_from_counts(400, 900, 30, 1000, delta).epsilon == pytest.approx(b.epsilon)
    # δ only lowers the bound; rates above ½ certify nothing (numerators ≤ 0 drop out)
    assert epsilon_from_counts(30, 1000, 400, 900, 0.0).epsilon > b.epsilon
    assert epsilon_from_counts(600, 1000, 600, 1000).epsilon == 0.0
    assert epsilon_from_counts(0, 10, 0, 10, delta=0.99).epsilon == 0.0


def test_epsilon_array_broadcasts_and_agrees_with_the_scalar_form():
    fp, fn = np.array([0, 5, 50, 500]), np.array([500, 50, 5, 0])
    got = epsilon_array(fp, 500, fn, 500, 1e-5, 0.1)
    want = [epsilon_from_counts(int(a), 500, int(b), 500, 1e-5, 0.1).epsilon
            for a, b in zip(fp, fn, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


# --- validity and tightness on known mechanisms -------------------------------------------------

@pytest.mark.parametrize("alpha", [0.05, 0.3])
def test_randomized_response_counts_exceed_epsilon_at_most_alpha_of_the_time(alpha):
    # 20 000 repetitions of the counts at the only useful threshold (score ≥ 1); a loose α
    # makes the check sharp: the union bound leaves the bound conservative by about half
    epsilon, n, reps = 1.0, 1000, 20_000
    rng = np.random.default_rng(1501)
    p_err = 1 / (1 + math.exp(epsilon))
    fp, fn = rng.binomial(n, p_err, reps), rng.binomial(n, p_err, reps)
    bounds = epsilon_array(fp, n, fn, n, 0.0, alpha)
    assert (bounds >= 0).all()
    assert (bounds > epsilon).mean() <= allowed_rate(alpha, reps)
    # the harness can see an invalid bound: the plug-in estimate exceeds ε about half the time
    plug_in = np.maximum(np.log((1 - fn / n) / (fp / n)), np.log((1 - fp / n) / (fn / n)))
    assert (plug_in > epsilon).mean() > 0.4


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_randomized_response_bound_holds_over_seeds(epsilon):
    reps = 300
    bounds = _bounds(np.random.default_rng(1502),
                     lambda rng, m: randomized_response(rng, epsilon, m), 500, reps)
    assert (bounds >= 0).all() and bounds.mean() > 0
    assert (bounds > epsilon).mean() <= allowed_rate(ALPHA, reps)


def test_randomized_response_bound_approaches_epsilon_as_the_count_grows():
    epsilon, rng = 1.0, np.random.default_rng(1503)

    def release(rng, m):
        return randomized_response(rng, epsilon, m)

    small = _bounds(rng, release, 1_000, 20).mean()
    large = _bounds(rng, release, 100_000, 8).mean()
    assert small < large <= epsilon
    assert large >= 0.95 * epsilon  # the Clopper–Pearson slack at n = 10⁵ is ~1.5 %


def test_the_gaussian_oracle_is_attained_by_the_best_threshold():
    # Balle & Wang's ε(δ) equals the largest log((TPR − δ)/FPR) over thresholds on the exact
    # population rates: the oracle and the bound's formula describe the same trade-off
    mu, delta = 1.0, 0.01
    t = np.linspace(-8, 8, 400_001)
    tpr, fpr = stats.norm.sf(t - mu), stats.norm.sf(t)
    ok = tpr > delta
    assert np.max(np.log((tpr[ok] - delta) / fpr[ok])) == pytest.approx(
        gaussian_epsilon(mu, delta), rel=1e-6)


@pytest.mark.parametrize("mu,delta", [(1.0, 0.1), (2.0, 1e-5)])
def test_gaussian_mechanism_bound_holds_at_its_exact_epsilon_delta(mu, delta):
    reps, true = 150, gaussian_epsilon(mu, delta)
    bounds = _bounds(np.random.default_rng(1504), lambda rng, m: gaussian_mechanism(rng, mu, m),
                     400, reps, delta=delta)
    assert (bounds >= 0).all() and bounds.mean() > 0.2 * true
    assert (bounds > true).mean() <= allowed_rate(ALPHA, reps)


# --- the threshold rule -----------------------------------------------------------------------

def test_the_counted_samples_never_choose_the_threshold():
    rng = np.random.default_rng(1505)
    m = flags(300, 300)
    select, count = gaussian_mechanism(rng, 1.0, m), gaussian_mechanism(rng, 1.0, m)
    tau = choose_threshold(select, m)
    bound = epsilon_lower_bound(select, m, count, m)
    assert bound.threshold == tau
    assert (bound.fp, bound.fn) == (int(((count >= tau) & ~m).sum()),
                                    int(((count < tau) & m).sum()))
    for seed in range(5):  # anything about the counting set leaves τ where it was
        shuffled = np.random.default_rng(seed).permutation(m)
        assert epsilon_lower_bound(select, m, count, shuffled).threshold == tau
        stronger = gaussian_mechanism(rng, 4.0, m)
        assert epsilon_lower_bound(select, m, stronger, m).threshold == tau


def test_choosing_the_threshold_on_the_counted_samples_would_overstate_epsilon():
    # scores that ignore membership: the true ε is 0, so any positive bound is an error. A
    # loose α (0.5) makes the selection bias visible in a few hundred repetitions.
    alpha, n, reps = 0.5, 100, 300
    rng = np.random.default_rng(1506)
    m = flags(n, n)
    honest, overfit = [], []
    for _ in range(reps):
        select, count = rng.standard_normal(2 * n), rng.standard_normal(2 * n)
        honest.append(epsilon_lower_bound(select, m, count, m, alpha=alpha).epsilon > 0)
        tau = choose_threshold(count, m, alpha=alpha)  # what the rule forbids
        overfit.append(epsilon_from_counts(int(((count >= tau) & ~m).sum()), n,
                                           int(((count < tau) & m).sum()), n,
                                           alpha=alpha).epsilon > 0)
    assert np.mean(honest) <= allowed_rate(alpha, reps)
    assert np.mean(overfit) > allowed_rate(alpha, reps)


def _loop_threshold(scores, membership, delta, alpha):
    """The definition, one candidate at a time: the highest τ among the best."""
    n1, n0 = int(membership.sum()), int((~membership).sum())
    best_tau, best = None, -1.0
    for tau in sorted(set(scores.tolist()), reverse=True):
        pred = scores >= tau
        eps = epsilon_from_counts(int((pred & ~membership).sum()), n0,
                                  int((~pred & membership).sum()), n1, delta, alpha).epsilon
        if eps > best:
            best_tau, best = tau, eps
    return best_tau


def test_the_vectorised_choice_equals_a_loop_over_thresholds():
    rng = np.random.default_rng(1507)
    for case in range(40):
        n = int(rng.integers(2, 40))
        membership = rng.random(n) < 0.5
        membership[:2] = (True, False)
        tied = case % 2 == 0  # integer scores: many ties across the classes
        scores = (rng.integers(0, 6, n) + 2.0 * membership if tied
                  else rng.standard_normal(n) + membership)
        if case % 10 == 3:
            scores[0], scores[1] = np.inf, -np.inf
        delta, alpha = (0.0, 1e-3, 0.2)[case % 3], (0.05, 0.4)[case % 2]
        assert choose_threshold(scores, membership, delta, alpha) == _loop_threshold(
            scores, membership, delta, alpha)


def test_infinite_scores_are_ranked_not_rejected():
    m = flags(3, 3)
    b = epsilon_lower_bound([np.inf, 5, 4, 1, 0, -np.inf], m, [np.inf, 9, 3, 2, -1, -np.inf], m,
                            alpha=0.5)
    assert b.threshold == 4.0 and (b.fp, b.fn) == (0, 1)


def test_split_halves_is_a_seeded_stratified_disjoint_split():
    m = flags(101, 60)
    select, count = split_halves(m, seed=3)
    assert np.intersect1d(select, count).size == 0
    np.testing.assert_array_equal(np.union1d(select, count), np.arange(m.size))
    assert (m[select].sum(), (~m[select]).sum()) == (50, 30)  # odd class: extra one counted
    again = split_halves(m, seed=3)
    np.testing.assert_array_equal(again[0], select)
    assert not np.array_equal(split_halves(m, seed=4)[0], select)
    a, b = split_halves(11, seed=0)
    assert (a.size, b.size) == (5, 6) and np.union1d(a, b).tolist() == list(range(11))


# --- bad input --------------------------------------------------------------------------------

M4 = flags(2, 2)
S4 = np.array([3.0, 2.0, 1.0, 0.0])


@pytest.mark.parametrize("kwargs,message", [
    ({"delta": -0.1}, r"delta must be in \[0, 1\).*δ of the \(ε, δ\)-DP claim"),
    ({"delta": 1.0}, r"delta must be in \[0, 1\)"),
    ({"delta": float("nan")}, r"delta is NaN"),
    ({"alpha": 0.0}, r"alpha must be in \(0, 1\).*0.05 for 95 % confidence"),
    ({"alpha": 1.0}, r"alpha must be in \(0, 1\)"),
    ({"alpha": "0.05"}, r"alpha must be a real number"),
])
def test_bad_delta_or_alpha_is_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        epsilon_lower_bound(S4, M4, S4.copy(), M4, **kwargs)
    with pytest.raises(ConfigError, match=message):
        epsilon_from_counts(1, 10, 1, 10, **kwargs)


@pytest.mark.parametrize("select,select_m,count,count_m,message", [
    ([], [], S4, M4, r"selection set is empty: pass at least one member and one non-member"),
    (S4, M4, [], [], r"counting set is empty"),
    ([3.0, np.nan, 1, 0], M4, S4, M4, r"1 of the 4 selection scores are NaN.*drop the"),
    (S4, M4, [3.0, 2, np.nan, 0], M4, r"1 of the 4 counting scores are NaN"),
    (S4, M4[:3], S4.copy(), M4, r"same length, got shapes \(4,\) and \(3,\)"),
    (S4.reshape(2, 2), M4.reshape(2, 2), S4, M4, r"1-D arrays"),
    (S4, [1, 1, 0, 2], S4.copy(), M4, r"boolean or 0/1 flags"),
    (S4, np.ones(4, bool), S4.copy(), M4, r"selection set has no non-members.*needs both"),
    (S4, M4, S4.copy(), np.zeros(4, bool), r"counting set has no members"),
    (["a", "b", "c", "d"], M4, S4, M4, r"selection scores must be numeric"),
])
def test_bad_samples_are_refused(select, select_m, count, count_m, message):
    with pytest.raises(ConfigError, match=message):
        epsilon_lower_bound(select, select_m, count, count_m)


def test_the_same_samples_for_selection_and_counting_are_refused():
    with pytest.raises(ConfigError, match=r"disjoint from the counted ones.*split_halves"):
        epsilon_lower_bound(S4, M4, S4, M4)


@pytest.mark.parametrize("args,message", [
    ((11, 10, 0, 10), r"fp \(false positives\) must be in \[0, 10\], got 11 \(out of n0 = 10\)"),
    ((0, 10, -1, 10), r"fn \(false negatives\) must be in \[0, 10\]"),
    ((0, 0, 0, 10), r"n0 \(non-members counted\) must be in >= 1.*at least one non-member"),
    ((0, 10, 0, 0), r"needs at least one member"),
    ((1.5, 10, 0, 10), r"fp \(false positives\) must be an integer count, got 1.5"),
])
def test_bad_counts_are_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        epsilon_from_counts(*args)


def test_bad_clopper_pearson_and_split_input_is_refused():
    with pytest.raises(ConfigError, match=r"level must be in \(0, 1\)"):
        clopper_pearson_upper(1, 10, 1.0)
    with pytest.raises(ConfigError, match=r"0 <= k <= n"):
        clopper_pearson_upper(11, 10, 0.9)
    with pytest.raises(ConfigError, match=r"integer counts"):
        clopper_pearson_upper(0.5, 10, 0.9)
    with pytest.raises(ConfigError, match=r"1 members cannot be split"):
        split_halves(flags(1, 5), seed=0)
