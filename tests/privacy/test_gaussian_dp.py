"""μ-GDP lower bounds and their ε at δ (miaudit.privacy.gaussian_dp; docs/algorithms.md §16),
checked on the Gaussian mechanism, whose μ and ε(δ) are known exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_mechanisms import allowed_rate, flags, gaussian_mechanism
from dp_mechanisms import gaussian_epsilon as exact_epsilon
from scipy import stats

from miaudit.errors import ConfigError
from miaudit.privacy import (
    epsilon_lower_bound,
    gaussian_delta,
    gaussian_dp_from_counts,
    gaussian_dp_lower_bound,
    gaussian_epsilon,
    mu_array,
    mu_from_rates,
)


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-8, 1e-5, 0.01, 0.1])
def test_epsilon_of_mu_gdp_is_the_analytic_gaussian_profile(mu, delta):
    eps = gaussian_epsilon(mu, delta)
    if gaussian_delta(0.0, mu) <= delta:
        assert eps == 0.0
    else:
        assert eps == pytest.approx(exact_epsilon(mu, delta), rel=1e-9)
        assert gaussian_delta(eps, mu) == pytest.approx(delta, rel=1e-6)


def test_the_profile_edges():
    assert gaussian_epsilon(0.0, 1e-5) == 0.0
    assert gaussian_epsilon(1.0, 0.0) == math.inf
    assert gaussian_epsilon(0.1, 0.5) == 0.0  # δ above δ(0): (0, δ)-DP already
    assert gaussian_delta(1000.0, 1.0) == 0.0  # no overflow of e^ε
    assert 0 < gaussian_epsilon(20.0, 1e-10) < math.inf


def test_mu_lower_bound_is_the_formula():
    b = gaussian_dp_from_counts(fp=50, n0=1000, fn=300, n1=1000, delta=1e-5, alpha=0.05)
    fpr, fnr = stats.beta.ppf(0.975, 51, 950), stats.beta.ppf(0.975, 301, 700)
    assert b.mu == pytest.approx(stats.norm.ppf(1 - fpr) + stats.norm.ppf(1 - fnr), rel=1e-10)
    assert b.epsilon == pytest.approx(exact_epsilon(b.mu, 1e-5), rel=1e-9)
    assert b.method == "gaussian-dp estimate" and json.loads(json.dumps(b.to_dict())) == \
        b.to_dict()
    assert mu_array(600, 1000, 600, 1000) == 0.0  # worse than chance certifies nothing
    np.testing.assert_allclose(mu_array([50, 300], 1000, [300, 50], 1000), b.mu)


def test_mu_from_rates_is_scipys_normal_quantile_bit_for_bit():
    # the run tabulates the rates once and calls this; it must agree with scipy.stats exactly
    rates = np.array([1e-12, 0.014764434812554551, 0.3, 0.5, 0.9776533130163066, 1.0])
    fpr, fnr = np.meshgrid(rates, rates[::-1])
    expected = np.maximum(0.0, stats.norm.isf(fpr) + stats.norm.isf(fnr))
    assert np.array_equal(mu_from_rates(fpr, fnr), expected)
    assert mu_from_rates(1.0, 1e-9) == 0.0  # a rate bounded only by 1 certifies nothing


def test_the_mu_bound_holds_on_the_gaussian_mechanism():
    # a loose α (0.3) makes the check sharp; the Clopper–Pearson machinery is the one checked
    # at α = 0.05 in test_bounds.py
    mu, n, reps, alpha = 1.0, 400, 100, 0.3
    rng = np.random.default_rng(1520)
    m = flags(n, n)
    got = [gaussian_dp_lower_bound(gaussian_mechanism(rng, mu, m), m,
                                   gaussian_mechanism(rng, mu, m), m, 1e-5, alpha)
           for _ in range(reps)]
    mus = np.array([g.mu for g in got])
    assert (mus >= 0).all() and mus.mean() > 0.5 * mu
    assert (mus > mu).mean() <= allowed_rate(alpha, reps)
    # on a Gaussian mechanism the ε estimate is as valid as μ (ε(δ) grows with μ)
    eps = np.array([g.epsilon for g in got])
    assert (eps > exact_epsilon(mu, 1e-5)).mean() <= allowed_rate(alpha, reps)


def test_the_estimate_is_tighter_than_the_threshold_bound_at_small_delta():
    mu, delta, n = 1.0, 1e-5, 2000
    rng = np.random.default_rng(1521)
    m = flags(n, n)
    select, count = gaussian_mechanism(rng, mu, m), gaussian_mechanism(rng, mu, m)
    gdp = gaussian_dp_lower_bound(select, m, count, m, delta)
    threshold = epsilon_lower_bound(select, m, count, m, delta)
    assert threshold.epsilon < gdp.epsilon <= exact_epsilon(mu, delta)
    # the threshold comes from the selection set only
    shuffled = np.random.default_rng(0).permutation(m)
    assert gaussian_dp_lower_bound(select, m, count, shuffled, delta).threshold == gdp.threshold


def test_bad_input_is_refused():
    with pytest.raises(ConfigError, match=r"delta must be > 0 for a Gaussian-DP ε.*1e-5"):
        gaussian_dp_from_counts(1, 10, 1, 10, delta=0.0)
    with pytest.raises(ConfigError, match=r"mu must be a finite number >= 0"):
        gaussian_epsilon(-1.0, 1e-5)
    with pytest.raises(ConfigError, match=r"alpha must be in \(0, 1\)"):
        mu_array(1, 10, 1, 10, alpha=2.0)
    s, m = np.arange(4.0), flags(2, 2)
    with pytest.raises(ConfigError, match=r"disjoint"):
        gaussian_dp_lower_bound(s, m, s, m)
    with pytest.raises(ConfigError, match=r"counting scores are NaN"):
        gaussian_dp_lower_bound(s, m, np.r_[np.nan, s[1:]], m)
