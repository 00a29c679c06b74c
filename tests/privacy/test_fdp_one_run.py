"""One-run f-DP auditing (miaudit.privacy.fdp_one_run; docs/algorithms.md §16): the paper's
recursion, the search for μ, soundness on canaries of a mechanism whose μ-GDP is exact, and
the comparison with the one-run ε bound of Steinke, Nasr & Jagielski 2023."""

from __future__ import annotations

import json

import numpy as np
import pytest
from dp_mechanisms import allowed_rate, gaussian_mechanism
from scipy import special

from miaudit.errors import ConfigError
from miaudit.privacy import (
    fdp_one_run_mu,
    fdp_one_run_mu_from_counts,
    fdp_one_run_rejects,
    gaussian_epsilon,
    one_run_epsilon_from_counts,
)

ALPHA = 0.05


def _paper_rejects(m, r, v, mu, tau=ALPHA):
    """The paper's test with abstention as its authors' implementation writes it: the full
    loop over i, no early stop, one μ at a time."""
    def inverse(x):  # f̄⁻¹ of μ-GDP: Φ(Φ⁻¹(x) − μ)
        return special.ndtr(special.ndtri(x) - mu)

    h, rr = tau * (r - v) / m, tau * v / m
    for i in range(v - 1, -1, -1):
        h_next = max(h, inverse(rr))
        rr, h = rr + (i / (r - i)) * (h_next - h), h_next
    return rr + h > r / m


# --- the test and the search ------------------------------------------------------------------

@pytest.mark.parametrize("m,r,v", [(1000, 100, 100), (1000, 100, 90), (1000, 500, 450),
                                   (200, 200, 150), (1000, 1000, 700), (50, 20, 12)])
def test_the_test_is_the_papers_recursion(m, r, v):
    mus = np.linspace(0.0, 4.0, 21)
    want = [_paper_rejects(m, r, v, mu) for mu in mus]
    assert fdp_one_run_rejects(m, r, v, mus).tolist() == want


@pytest.mark.parametrize("m,r,v", [(1000, 100, 100), (1000, 300, 280), (1000, 1000, 650),
                                   (100, 40, 35)])
def test_mu_is_the_edge_of_the_rejected_mus(m, r, v):
    b = fdp_one_run_mu_from_counts(m, r, v, delta=1e-5, alpha=ALPHA)
    assert b.mu > 0
    # rejection falls off once in μ: every μ below μ̂ is rejected, none above it
    grid = np.linspace(0.0, 2.0 * b.mu, 401)
    rejected = fdp_one_run_rejects(m, r, v, grid)
    assert rejected[grid <= b.mu].all() and not rejected[grid > b.mu * (1 + 1e-6)].any()
    assert fdp_one_run_rejects(m, r, v, b.mu)  # the reported μ itself is rejected
    assert b.epsilon == gaussian_epsilon(b.mu, 1e-5)
    assert (b.method, b.m, b.guesses, b.correct, b.k_plus) == (
        "one-run f-dp gaussian", m, r, v, None)


def test_mu_grows_with_the_correct_guesses_and_falls_with_alpha():
    mus = [fdp_one_run_mu_from_counts(1000, 200, v).mu for v in range(0, 201, 5)]
    assert all(a <= b for a, b in zip(mus, mus[1:], strict=False))
    assert mus[0] == 0.0 and mus[20] == 0.0  # v = 0, and v = r/2: chance
    assert mus[-1] > 1.0
    strict = fdp_one_run_mu_from_counts(1000, 200, 190, alpha=0.001).mu
    assert 0 < strict < fdp_one_run_mu_from_counts(1000, 200, 190).mu


def test_guesses_are_the_highest_and_lowest_scores():
    scores = np.array([0.9, 0.1, 0.5, 0.8, 0.2, 0.7, 0.3, 0.6])
    included = np.array([1, 0, 1, 0, 1, 1, 0, 1], bool)
    # IN: the 3 highest (0.9 ✓, 0.8 ✗, 0.7 ✓); OUT: the 2 lowest (0.1 ✓, 0.2 ✗): 3 of 5
    b = fdp_one_run_mu(scores, included, k_plus=3, k_minus=2, alpha=0.5)
    assert (b.m, b.k_plus, b.k_minus, b.guesses, b.correct) == (8, 3, 2, 5, 3)
    assert b.mu == fdp_one_run_mu_from_counts(8, 5, 3, alpha=0.5).mu
    d = b.to_dict()
    assert list(d) == ["mu", "epsilon", "method", "alpha", "delta", "m", "k_plus", "k_minus",
                       "guesses", "correct"]
    assert json.loads(json.dumps(d)) == d


# --- tighter than the ε-DP one-run bound on the same counts -----------------------------------

@pytest.mark.parametrize("r,v", [(100, 100), (300, 300), (500, 500), (100, 95), (300, 285),
                                 (500, 475)])
def test_it_is_tighter_than_the_epsilon_one_run_bound(r, v):
    # m = 1000 canaries, (nearly) every guess right: the regime of the paper's figures
    delta = 1e-5
    fdp = fdp_one_run_mu_from_counts(1000, r, v, delta, ALPHA)
    eps = one_run_epsilon_from_counts(1000, r, v, delta, ALPHA)
    assert fdp.epsilon > 1.4 * eps.epsilon > 0


# --- soundness on canaries of an exactly μ-GDP mechanism --------------------------------------

def _correct(rng, mu, m, k, reps):
    """Correct guesses of k IN (highest) and k OUT (lowest) guesses on m canaries released by
    the Gaussian mechanism b·μ + N(0, 1) (exactly μ-GDP in each canary's inclusion b), one
    count per repetition."""
    included = rng.random((reps, m)) < 0.5
    scores = gaussian_mechanism(rng, mu, included)
    order = np.argsort(scores, axis=1)
    rows = np.arange(reps)[:, None]
    return (included[rows, order[:, m - k:]].sum(axis=1)
            + (~included[rows, order[:, :k]]).sum(axis=1))


def _least_rejected(m, r, mu):
    """The fewest correct guesses of r that reject μ (by bisection: rejection is upward
    closed in v, checked by the caller)."""
    lo, hi = -1, r  # lo does not reject (or is −1), hi does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fdp_one_run_rejects(m, r, mid, mu) else (mid, hi)
    return hi


@pytest.mark.parametrize("mu,k", [(0.5, 500), (1.0, 50), (1.5, 100), (0.0, 100)])
def test_the_rejection_region_has_probability_at_most_alpha(mu, k):
    # the counts at which the true μ is rejected, and how often the mechanism lands there
    m, reps, r = 1000, 20_000, 2 * k
    assert fdp_one_run_rejects(m, r, r, mu)  # a region to test
    v0 = _least_rejected(m, r, mu)
    assert not fdp_one_run_rejects(m, r, v0 - 1, mu)
    assert all(fdp_one_run_rejects(m, r, v, mu) for v in range(v0, r + 1, max(1, r // 20)))
    correct = _correct(np.random.default_rng(2710), mu, m, k, reps)
    assert (correct >= v0).mean() <= allowed_rate(ALPHA, reps)


@pytest.mark.parametrize("mu,k", [(1.0, 50), (2.0, 100)])
def test_the_bound_holds_on_canaries_of_a_gaussian_mechanism(mu, k):
    m, reps = 1000, 200
    correct = _correct(np.random.default_rng(2711), mu, m, k, reps)
    bounds = np.array([fdp_one_run_mu_from_counts(m, 2 * k, int(v)).mu for v in correct])
    assert (bounds >= 0).all() and bounds.mean() > 0.4 * mu
    assert (bounds > mu).mean() <= allowed_rate(ALPHA, reps)


# --- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("args,kwargs,message", [
    ((10, 11, 5), {}, r"r \(guesses\) must be in \[1, 10\], got 11"),
    ((10, 8, 9), {}, r"v \(correct guesses\) must be in \[0, 8\], got 9"),
    ((10, 8, 8), {"delta": 0.0}, r"delta must be > 0 for the f-DP one-run bound"),
    ((10, 8, 8), {"alpha": 1.0}, r"alpha must be in \(0, 1\)"),
])
def test_bad_counts_are_refused(args, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        fdp_one_run_mu_from_counts(*args, **kwargs)


def test_bad_guesses_and_mus_are_refused():
    with pytest.raises(ConfigError, match=r"k_plus \+ k_minus = 11 must be between 1"):
        fdp_one_run_mu(np.arange(10.0), np.arange(10) % 2 == 0, 6, 5)
    with pytest.raises(ConfigError, match=r"mu must be >= 0"):
        fdp_one_run_rejects(10, 8, 8, [1.0, np.nan])
