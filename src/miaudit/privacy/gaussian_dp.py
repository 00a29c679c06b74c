"""μ-GDP from a threshold attack, and its ε at δ (Nasr et al. 2023, "Tight Auditing").

Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini & Terzis 2023, "Tight Auditing of
Differentially Private Machine Learning" (USENIX Security 2023), audit DP-SGD in the Gaussian
differential privacy (GDP) framework of Dong, Roth & Su 2022 ("Gaussian Differential Privacy"):
a μ-GDP mechanism forces every test to have FNR ≥ Φ(Φ⁻¹(1 − FPR) − μ), so a test with error
rates (FPR, FNR) certifies

    μ ≥ Φ⁻¹(1 − FPR) + Φ⁻¹(1 − FNR)      (symmetric in the two rates).

With the Clopper–Pearson upper bounds FPR⁺, FNR⁺ (each at level 1 − α/2, as in
:mod:`~miaudit.privacy.bounds`) this is a lower bound μ_lb = max(0, Φ⁻¹(1 − FPR⁺) + Φ⁻¹(1 − FNR⁺))
that holds with confidence 1 − α against any μ-GDP claim. Its ε at δ is the exact privacy
profile of μ-GDP (Balle & Wang 2018, "Improving the Gaussian Mechanism for Differential Privacy";
Dong, Roth & Su 2022):

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2),   solved for ε.

That ε is an *estimate*, not a certificate: it is a valid lower bound only for a mechanism
whose trade-off curve is Gaussian (DP-SGD's is close to it; that is the paper's premise). It
uses the whole curve, so it comes much closer to the true ε at small δ than the threshold
bound, which needs rare events. Report it as such (``method = "gaussian-dp estimate"``).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from miaudit.errors import ConfigError
from miaudit.privacy._checks import check_alpha, check_delta, check_error_counts
from miaudit.privacy.bounds import (
    best_threshold,
    check_disjoint,
    clopper_pearson_upper,
    count_at,
)
from miaudit.records.bounds import GaussianDPBound

__all__ = [
    "GaussianDPBound",
    "gaussian_delta",
    "gaussian_epsilon",
    "mu_array",
    "mu_from_rates",
    "gaussian_dp_from_counts",
    "gaussian_dp_lower_bound",
]

METHOD = "gaussian-dp estimate"




def gaussian_delta(epsilon: float, mu: float) -> float:
    """The least δ at which a μ-GDP mechanism is (ε, δ)-DP (Balle & Wang 2018)."""
    if mu <= 0.0:
        return 0.0
    from scipy import stats  # here, not at import: scipy.stats costs ~0.3 s to import

    # e^ε Φ(·) in log space: e^ε alone overflows long before the product does
    scaled = math.exp(epsilon + stats.norm.logcdf(-epsilon / mu - mu / 2))
    return max(0.0, float(stats.norm.cdf(-epsilon / mu + mu / 2)) - scaled)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The ε at which a μ-GDP mechanism is (ε, ``delta``)-DP; 0 when δ ≥ δ(0) or μ = 0."""
    delta = check_delta(delta)
    if not mu >= 0.0 or math.isinf(mu):
        raise ConfigError(f"mu must be a finite number >= 0, got {mu!r}")
    if delta == 0.0 and mu > 0.0:
        return math.inf  # the Gaussian mechanism is not ε-DP for any finite ε
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta(hi, mu) > delta:  # δ(ε) falls to 0 as ε grows
        hi *= 2.0
    from scipy import optimize

    return float(optimize.brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, hi, xtol=1e-12))


def mu_array(fp: ArrayLike, n0: ArrayLike, fn: ArrayLike, n1: ArrayLike,
             alpha: float = 0.05) -> np.ndarray:
    """μ_lb = max(0, Φ⁻¹(1 − FPR⁺) + Φ⁻¹(1 − FNR⁺)) for arrays of counts (broadcast)."""
    alpha = check_alpha(alpha)
    level = 1.0 - alpha / 2
    return mu_from_rates(clopper_pearson_upper(fp, n0, level),
                         clopper_pearson_upper(fn, n1, level))


def mu_from_rates(fpr_upper: ArrayLike, fnr_upper: ArrayLike) -> np.ndarray:
    """μ_lb's formula on upper bounds of the two error rates (already at their level):
    max(0, Φ⁻¹(1 − FPR⁺) + Φ⁻¹(1 − FNR⁺)). For callers that tabulate the Clopper–Pearson
    bounds once and evaluate many thresholds (a run's attacks)."""
    # Φ⁻¹(1 − p) = −ndtri(p), scipy.stats.norm.isf's own formula, without importing
    # scipy.stats; −ndtri(1) = −inf: a rate bounded only by 1 certifies nothing
    result: np.ndarray = np.maximum(0.0, -special.ndtri(np.asarray(fpr_upper, dtype=np.float64))
                                    - special.ndtri(np.asarray(fnr_upper, dtype=np.float64)))
    return result


def gaussian_dp_from_counts(fp: int, n0: int, fn: int, n1: int, delta: float = 1e-5,
                            alpha: float = 0.05,
                            threshold: float | None = None) -> GaussianDPBound:
    """μ_lb and its ε at δ from counts at a threshold chosen without the counted samples."""
    fp, n0, fn, n1 = check_error_counts(fp, n0, fn, n1)
    delta, alpha = check_delta(delta), check_alpha(alpha)
    if delta == 0.0:
        raise ConfigError("delta must be > 0 for a Gaussian-DP ε: a μ-GDP mechanism with μ > 0 "
                          "is not ε-DP for any finite ε (pass e.g. 1e-5)")
    mu = float(mu_array(fp, n0, fn, n1, alpha))
    level = 1.0 - alpha / 2
    return GaussianDPBound(
        mu=mu, epsilon=gaussian_epsilon(mu, delta), method=METHOD, alpha=alpha, delta=delta,
        n_members=n1, n_nonmembers=n0, fp=fp, fn=fn,
        fpr_upper=float(clopper_pearson_upper(fp, n0, level)),
        fnr_upper=float(clopper_pearson_upper(fn, n1, level)),
        threshold=None if threshold is None else float(threshold),
    )


def gaussian_dp_lower_bound(select_scores: ArrayLike, select_membership: ArrayLike,
                            count_scores: ArrayLike, count_membership: ArrayLike,
                            delta: float = 1e-5, alpha: float = 0.05) -> GaussianDPBound:
    """τ maximising μ_lb on the selection set, then μ_lb and its ε on the counting set (the
    same disjoint-sets rule as :func:`~miaudit.privacy.bounds.epsilon_lower_bound`)."""
    check_disjoint(select_scores, count_scores)
    delta, alpha = check_delta(delta), check_alpha(alpha)
    tau = best_threshold(select_scores, select_membership,
                         lambda fp, n0, fn, n1: mu_array(fp, n0, fn, n1, alpha))
    fp, n0, fn, n1 = count_at(tau, count_scores, count_membership)
    return gaussian_dp_from_counts(fp, n0, fn, n1, delta, alpha, threshold=tau)
