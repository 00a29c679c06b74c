"""Mechanisms whose privacy is known exactly, for checking the ε lower bounds against the truth.

- Randomized response on one bit: releases the bit with probability e^ε/(1 + e^ε), else its
  flip; exactly ε-DP (and (ε, δ)-DP for every δ), and the attack's score is the released bit.
- The Gaussian mechanism on one bit: releases b·μ + N(0, 1) (sensitivity 1, noise σ = 1/μ, up
  to scale); its exact ε at δ is the analytic Gaussian mechanism of Balle & Wang 2018
  ("Improving the Gaussian Mechanism for Differential Privacy: Analytical Calibration and
  Optimal Denoising"): δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ), solved for ε.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats


def randomized_response(rng: np.random.Generator, epsilon: float,
                        bits: np.ndarray) -> np.ndarray:
    """Released bits (as float scores) for an array of true bits, any shape."""
    keep = rng.random(bits.shape) < 1.0 / (1.0 + math.exp(-epsilon))
    return np.where(keep, bits, ~bits).astype(np.float64)


def gaussian_mechanism(rng: np.random.Generator, mu: float, bits: np.ndarray) -> np.ndarray:
    return bits * mu + rng.standard_normal(bits.shape)


def gaussian_delta(epsilon: float, mu: float) -> float:
    """Balle & Wang 2018: the least δ at which the Gaussian mechanism is (ε, δ)-DP."""
    return float(stats.norm.cdf(mu / 2 - epsilon / mu)
                 - math.exp(epsilon) * stats.norm.cdf(-mu / 2 - epsilon / mu))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The exact ε(δ) of the Gaussian mechanism (δ(ε) decreases in ε)."""
    return float(optimize.brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, 200.0,
                                 xtol=1e-12))


def flags(n_members: int, n_nonmembers: int) -> np.ndarray:
    return np.r_[np.ones(n_members, bool), np.zeros(n_nonmembers, bool)]


def allowed_rate(alpha: float, reps: int) -> float:
    """α plus three binomial standard deviations over ``reps`` repetitions: the most often a
    valid bound may exceed the truth in a seeded simulation (a 3σ slack; the seeds are fixed,
    so the outcome is deterministic, not flaky)."""
    return alpha + 3.0 * math.sqrt(alpha * (1.0 - alpha) / reps)
