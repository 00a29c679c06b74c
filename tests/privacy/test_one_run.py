"""One-run auditing (miaudit.privacy.one_run; docs/algorithms.md §16): the formulas, and the
bound against canaries released by mechanisms whose ε is known exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_mechanisms import allowed_rate, randomized_response
from scipy import optimize, stats

from miaudit.errors import ConfigError
from miaudit.privacy import (
    min_canaries,
    min_guesses,
    one_run_epsilon,
    one_run_epsilon_from_counts,
    one_run_p_value,
)

ALPHA = 0.05


def _paper_p_value(m, r, v, eps, delta):
    """Theorem 5.2's p-value as the paper's appendix algorithm computes it: one loop over i."""
    q = 1 / (1 + math.exp(-eps))
    beta = stats.binom.sf(v - 1, r, q)
    worst, total = 0.0, 0.0
    for i in range(1, v + 1):
        total += stats.binom.pmf(v - i, r, q)  # P[v − i ≤ W̃ < v]
        worst = max(worst, total / i)
    return min(1.0, beta + 2 * m * delta * worst)


# --- the formulas -----------------------------------------------------------------------------

@pytest.mark.parametrize("m,r,v", [(1000, 1000, 700), (1000, 100, 90), (50, 20, 20),
                                   (10_000, 500, 290), (1000, 100, 50)])
def test_the_pure_bound_is_the_binomial_tail_solved_for_epsilon(m, r, v):
    b = one_run_epsilon_from_counts(m, r, v, delta=0.0, alpha=ALPHA)

    def excess(eps):  # P[Binomial(r, e^ε/(1+e^ε)) ≥ v] − α, increasing in ε
        return stats.binom.sf(v - 1, r, 1 / (1 + math.exp(-eps))) - ALPHA

    want = 0.0 if excess(0.0) > 0 else optimize.brentq(excess, 0.0, 50.0, xtol=1e-12)
    assert b.epsilon == pytest.approx(want, abs=1e-7)
    assert (b.method, b.m, b.guesses, b.correct, b.k_plus) == ("one-run", m, r, v, None)
    if b.epsilon > 0:
        assert one_run_p_value(m, r, v, b.epsilon) <= ALPHA  # the side that rejects


def test_all_guesses_right_has_a_closed_form():
    # v = r: P[W̃ ≥ r] = q^r, so ε = logit(α^(1/r))
    for r in (5, 40, 1000):
        q = ALPHA ** (1 / r)
        assert one_run_epsilon_from_counts(r, r, r).epsilon == pytest.approx(
            math.log(q / (1 - q)), abs=1e-7)


@pytest.mark.parametrize("m,r,v,eps,delta", [(1000, 100, 90, 1.0, 1e-5), (200, 200, 150, 0.3, 1e-3),
                                             (50, 50, 50, 2.0, 0.01), (10, 7, 0, 1.0, 0.1),
                                             (5000, 300, 260, 1.5, 0.0)])
def test_the_delta_corrected_p_value_is_the_papers_algorithm(m, r, v, eps, delta):
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        _paper_p_value(m, r, v, eps, delta), rel=1e-10, abs=1e-15)


def test_the_delta_corrected_bound_is_at_most_the_pure_bound():
    for m, r, v in [(1000, 1000, 700), (1000, 100, 95), (100, 100, 100), (5000, 400, 300)]:
        pure = one_run_epsilon_from_counts(m, r, v).epsilon
        previous = pure
        for delta in (1e-8, 1e-5, 1e-4, 1e-3):
            b = one_run_epsilon_from_counts(m, r, v, delta=delta)
            assert b.method == "one-run delta-corrected"
            assert 0.0 <= b.epsilon <= previous + 1e-12  # and it falls as δ grows
            if b.epsilon > 0:
                assert one_run_p_value(m, r, v, b.epsilon, delta) <= ALPHA
            previous = b.epsilon
        # a negligible δ changes (almost) nothing
        assert one_run_epsilon_from_counts(m, r, v, delta=1e-12).epsilon == pytest.approx(
            pure, abs=1e-3)


def test_guesses_are_the_highest_and_lowest_scores():
    scores = np.array([0.9, 0.1, 0.5, 0.8, 0.2, 0.7, 0.3, 0.6])
    included = np.array([1, 0, 1, 0, 1, 1, 0, 1], bool)
    # IN: the 3 highest (0.9 ✓, 0.8 ✗, 0.7 ✓); OUT: the 2 lowest (0.1 ✓, 0.2 ✗): 3 of 5
    b = one_run_epsilon(scores, included, k_plus=3, k_minus=2, alpha=0.5)
    assert (b.m, b.k_plus, b.k_minus, b.guesses, b.correct) == (8, 3, 2, 5, 3)
    assert b.epsilon == one_run_epsilon_from_counts(8, 5, 3, alpha=0.5).epsilon
    d = b.to_dict()
    assert list(d) == ["epsilon", "method", "alpha", "delta", "m", "k_plus", "k_minus",
                       "guesses", "correct"]
    assert json.loads(json.dumps(d)) == d


# --- validity on known mechanisms -------------------------------------------------------------

def _canary_bounds(release, epsilon, m, k, reps, seed, delta=0.0):
    rng = np.random.default_rng(seed)
    included = rng.random((reps, m)) < 0.5  # each canary in with probability ½
    scores = release(rng, epsilon, included)
    return np.array([one_run_epsilon(s, inc, k, k, delta=delta).epsilon
                     for s, inc in zip(scores, included, strict=True)])


def _laplace(rng, epsilon, bits):
    # the Laplace mechanism on one bit, scale 1/ε: exactly ε-DP, and in its tails (score > 1
    # or < 0) the likelihood ratio is exactly e^ε, so the top guesses are as good as ε allows
    return bits + rng.laplace(0.0, 1.0 / epsilon, bits.shape)


@pytest.mark.parametrize("release,k", [(randomized_response, 500), (_laplace, 100)],
                         ids=["randomized-response-all-guessed", "laplace-abstaining"])
def test_the_bound_holds_on_canaries_of_an_epsilon_dp_mechanism(release, k):
    epsilon, reps = 1.0, 300
    bounds = _canary_bounds(release, epsilon, 1000, k, reps, seed=1510)
    assert (bounds >= 0).all() and bounds.mean() > 0.5 * epsilon
    assert (bounds > epsilon).mean() <= allowed_rate(ALPHA, reps)


def test_the_delta_corrected_bound_holds_on_canaries():
    # an ε-DP mechanism is (ε, δ)-DP for every δ
    epsilon, reps, delta = 1.0, 100, 1e-5
    bounds = _canary_bounds(_laplace, epsilon, 1000, 100, reps, seed=1511, delta=delta)
    pure = _canary_bounds(_laplace, epsilon, 1000, 100, reps, seed=1511)
    assert (bounds >= 0).all() and (bounds <= pure + 1e-12).all()
    assert (bounds > epsilon).mean() <= allowed_rate(ALPHA, reps)


# --- designs too small for any bound ----------------------------------------------------------

def test_too_few_canaries_name_the_canaries_needed():
    assert min_canaries(0.0, ALPHA) == 5  # 2^-5 < 0.05 ≤ 2^-4
    with pytest.raises(ConfigError, match=r"m = 4 canaries.*use at least m = 5 canaries"):
        one_run_epsilon_from_counts(4, 4, 4)
    with pytest.raises(ConfigError, match=r"guess on at least r = 5 of these 1000.*is m = 5"):
        one_run_epsilon_from_counts(1000, 3, 3)
    assert min_guesses(1000, 0.0, ALPHA) == 5 and min_guesses(3) is None


def test_the_canaries_needed_with_delta_are_computed_not_guessed():
    delta = 0.01
    needed = min_canaries(delta, ALPHA)
    assert needed is not None and needed > 5  # the δ term costs canaries
    assert one_run_epsilon_from_counts(needed, needed, needed, delta=delta).epsilon > 0
    with pytest.raises(ConfigError, match=rf"use at least m = {needed} canaries"):
        one_run_epsilon_from_counts(needed - 1, needed - 1, needed - 1, delta=delta)
    with pytest.raises(ConfigError, match=r"no number of canaries is enough.*smaller delta"):
        one_run_epsilon_from_counts(1000, 1000, 1000, delta=0.03)  # 2δ ≥ α


# --- bad input --------------------------------------------------------------------------------

SCORES = np.arange(10.0)
INCLUDED = np.arange(10) % 2 == 0


@pytest.mark.parametrize("kwargs,message", [
    ({"k_plus": 6, "k_minus": 5}, r"k_plus \+ k_minus = 11 must be between 1 and the number of "
                                  r"canaries m = 10.*may not overlap"),
    ({"k_plus": 0, "k_minus": 0}, r"k_plus \+ k_minus = 0 must be between 1"),
    ({"k_plus": -1, "k_minus": 5}, r"k_plus \(IN guesses\) must be in \[0, 10\], got -1"),
    ({"k_plus": 5.0, "k_minus": 5}, r"k_plus \(IN guesses\) must be an integer count"),
    ({"delta": 1.5}, r"delta must be in \[0, 1\)"),
    ({"alpha": 0.0}, r"alpha must be in \(0, 1\)"),
])
def test_bad_guesses_delta_or_alpha_are_refused(kwargs, message):
    args = {"k_plus": 5, "k_minus": 5} | kwargs
    with pytest.raises(ConfigError, match=message):
        one_run_epsilon(SCORES, INCLUDED, **args)


@pytest.mark.parametrize("scores,included,message", [
    ([], [], r"canary set is empty"),
    (np.r_[np.nan, SCORES[1:]], INCLUDED, r"1 of the 10 canary scores are NaN"),
    (SCORES, INCLUDED[:9], r"scores and included must be 1-D arrays of the same length"),
    (SCORES, np.arange(10), r"included must be boolean or 0/1 flags"),
])
def test_bad_canaries_are_refused(scores, included, message):
    with pytest.raises(ConfigError, match=message):
        one_run_epsilon(scores, included, 1, 1)


@pytest.mark.parametrize("args,message", [
    ((10, 11, 5), r"r \(guesses\) must be in \[1, 10\], got 11: between 1 and the number"),
    ((10, 0, 0), r"r \(guesses\) must be in \[1, 10\]"),
    ((10, 8, 9), r"v \(correct guesses\) must be in \[0, 8\], got 9 \(out of r = 8"),
    ((0, 0, 0), r"m \(canaries\) must be in >= 1"),
])
def test_bad_counts_are_refused(args, message):
    with pytest.raises(ConfigError, match=message):
        one_run_epsilon_from_counts(*args)
