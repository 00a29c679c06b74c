"""BaVarIA, Bayesian variance inference (Brännvall, "Exponential-Family Membership Inference:
From LiRA and RMIA to BaVarIA", arXiv 2603.11799, 2026).

What the paper's abstract fixes: LiRA's Gaussian test on the references' statistic, with the
per-sample variance replaced by a conjugate normal-inverse-gamma (NIG) posterior, giving a
Student-t predictive (BaVarIA-t) or a Gaussian with a stabilised variance (BaVarIA-n), "without
additional hyperparameter tuning". The paper's body (its prior settings, its offline test) was
not reachable from this workplace; what follows is the standard conjugate construction, each
choice stated (docs/algorithms.md §18):

- Statistic: LiRA's phi (logit-scaled confidence) per query; sides IN/OUT as in LiRA, with
  LiRA's equal counts (the moments are shared with `lira.py` through the view's memo).
- Prior per side and query: `mu | s2 ~ N(mu0, s2 / kappa0)` with `kappa0 -> 0` (the mean is the
  references' mean), `s2 ~ InvGamma(nu0 / 2, nu0 * s0^2 / 2)`: s0^2 a prior variance and nu0
  its strength in pseudo-references. Update with k references, mean m, sum of squared
  deviations S: `alpha_n = (nu0 + k) / 2`, `beta_n = (nu0 s0^2 + S) / 2`, `kappa_n = k`.
- Hyper-parameters (`prior_strength=None`, the default): empirical Bayes across samples,
  on the reference models only. (nu0, s0^2) maximise the marginal likelihood of the
  per-sample sums of squares, `S | s2 ~ s2 chi2_{k-1}` with s2 from the prior, over the samples
  with k >= 2 references on the side. A number fixes nu0 and sets s0^2 to LiRA's pooled
  fixed variance: `inf` gives LiRA fixed-variance, `0` per-sample LiRA (BaVarIA-n).
- BaVarIA-n: `N(m, v)` with `v = beta_n / alpha_n = (nu0 s0^2 + S) / (nu0 + k)` (the inverse of
  the posterior mean precision). BaVarIA-t: the NIG posterior predictive, Student-t with
  `nu0 + k` degrees of freedom, location m, scale^2 `v (1 + 1/k)`.
- Offline (`bavaria-n`, `bavaria-t`): LiRA's one-sided test, `mean_q log F((phi_t - m) / scale)`
  with F the predictive CDF (OUT side). Online (`*-online`): `mean_q [log f_IN(phi_t) -
  log f_OUT(phi_t)]` with the predictive densities.

Variances are floored at LiRA's `SIGMA_FLOOR`^2. A sample without a reference on a side the
score needs scores NaN.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy.special import gammaln, log_ndtr, stdtr

from miaudit.attacks.calibration import query_mean
from miaudit.attacks.lira import (
    EQUAL_COUNTS,
    SIGMA_FLOOR,
    Moments,
    _sides,
    gaussians,
    log_normal_pdf,
    moments,
)
from miaudit.attacks.params import Param
from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView
from miaudit.errors import AttackError

_TINY = np.finfo(np.float64).tiny
_LOG_STRENGTH_BOUNDS = (np.log(1e-2), np.log(1e6))

PRIOR_STRENGTH = Param("prior_strength", None, "float", "nu0, the variance prior's weight in "
                       "pseudo-references; null: empirical Bayes; inf: LiRA fixed-variance; "
                       "0: per-sample LiRA", low=0.0, high=np.inf, nullable=True)


@dataclass(frozen=True)
class Prior:
    """The inverse-gamma prior on one side's variance, per query."""

    strength: np.ndarray  # nu0 [Q], pseudo-references; may be inf
    variance: np.ndarray  # s0^2 [Q]


@dataclass(frozen=True)
class Predictive:
    """One side's NIG posterior, per sample and query (NaN where the side has no reference)."""

    mean: np.ndarray  # m [N, Q]
    variance: np.ndarray  # v = beta_n / alpha_n [N, Q]
    dof: np.ndarray  # nu0 + k [N, Q]; inf for an infinitely strong prior
    count: np.ndarray  # k [N]


def marginal_loglik(
    log_strength: float, log_variance: float, sq_dev: np.ndarray, count: np.ndarray
) -> float:
    """Log marginal likelihood (up to terms free of the prior) of the sums of squares `sq_dev`
    [n] of `count` [n] references each (all >= 2), under `S | s2 ~ s2 chi2_{k-1}` and
    `s2 ~ InvGamma(nu0/2, nu0 s0^2/2)`."""
    a0 = 0.5 * np.exp(log_strength)
    b0 = a0 * np.exp(log_variance)
    m = 0.5 * (count - 1)
    terms = a0 * np.log(b0) - gammaln(a0) + gammaln(a0 + m) - (a0 + m) * np.log(b0 + 0.5 * sq_dev)
    return float(terms.sum())


def empirical_bayes(sq_dev: np.ndarray, count: np.ndarray, pooled: float) -> tuple[float, float]:
    """(nu0, s0^2) maximising `marginal_loglik`, nu0 within [1e-2, 1e6], started at nu0 = 4 and
    the pooled variance."""
    start = np.array([np.log(4.0), np.log(max(pooled, SIGMA_FLOOR**2))])

    def loss(p: np.ndarray) -> float:
        return -marginal_loglik(p[0], p[1], sq_dev, count) / count.size

    from scipy.optimize import minimize  # here: scipy.optimize costs ~0.2 s to import

    bounds = [_LOG_STRENGTH_BOUNDS, (np.log(SIGMA_FLOOR**2), np.log(1e12))]
    best = minimize(loss, start, method="L-BFGS-B", bounds=bounds)
    return float(np.exp(best.x[0])), float(np.exp(best.x[1]))


def fit_prior(fit: Moments, pooled: np.ndarray, strength: float | None) -> Prior:
    """The prior of one side from its moments: empirical Bayes per query (`strength` None), or
    nu0 = `strength` with s0^2 = `pooled` [Q], LiRA's fixed variance. Empirical Bayes without a
    sample of two references falls back to nu0 = inf, s0^2 = pooled."""
    q = fit.mean.shape[1]
    if strength is not None:
        if not strength >= 0:
            raise AttackError(f"BaVarIA's prior_strength must be >= 0 or None; got {strength}.")
        return Prior(np.full(q, float(strength)), pooled)
    pool = fit.count >= 2
    if not pool.any():
        return Prior(np.full(q, np.inf), pooled)
    fits = [empirical_bayes(fit.sq_dev[pool, j], fit.count[pool], pooled[j]) for j in range(q)]
    return Prior(np.array([f[0] for f in fits]), np.array([f[1] for f in fits]))


def predictive(fit: Moments, prior: Prior) -> Predictive:
    """The NIG posterior of each sample from its moments and the side's prior."""
    k = fit.count[:, None].astype(np.float64)
    nu0, s0 = prior.strength[None, :], prior.variance[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        finite = (nu0 * s0 + fit.sq_dev) / (nu0 + k)
    variance = np.where(np.isinf(nu0), s0, finite)
    variance = np.maximum(variance, SIGMA_FLOOR**2)
    has = k > 0
    nan = np.nan
    return Predictive(
        mean=np.where(has, fit.mean, nan),
        variance=np.where(has, variance, nan),
        dof=np.where(has, nu0 + k, nan),
        count=fit.count,
    )


def log_t_cdf(z: np.ndarray, dof: np.ndarray) -> np.ndarray:
    """log of the Student-t CDF: `log1p(-F(-z))` above 0 (no saturation near 1), `log F(z)`
    below (floored at the smallest float64); dof = inf is the normal."""
    upper = np.log1p(-stdtr(dof, -np.abs(z)))
    lower = np.log(np.maximum(stdtr(dof, -np.abs(z)), _TINY))
    result: np.ndarray = np.where(z >= 0, upper, lower)
    return result


def log_t_pdf(x: np.ndarray, mean: np.ndarray, scale: np.ndarray, dof: np.ndarray) -> np.ndarray:
    """log of the Student-t density with `dof` degrees of freedom (inf: the normal)."""
    z = (x - mean) / scale
    normal = log_normal_pdf(x, mean, scale)
    nu = np.where(np.isinf(dof), 1.0, dof)
    student = (gammaln(0.5 * (nu + 1)) - gammaln(0.5 * nu) - 0.5 * np.log(nu * np.pi)
               - np.log(scale) - 0.5 * (nu + 1) * np.log1p(z * z / nu))
    return np.where(np.isinf(dof), normal, student)


def t_scale(side: Predictive) -> np.ndarray:
    """The predictive Student-t scale, `sqrt(v (1 + 1/k))`."""
    k = np.maximum(side.count, 1)[:, None]
    result: np.ndarray = np.sqrt(side.variance * (1.0 + 1.0 / k))
    return result


def _side(view: TargetView, side: int, equal_counts: bool, strength: float | None) -> Predictive:
    """The NIG posterior of one side (0: IN, 1: OUT) of phi; moments shared with LiRA."""
    mask = _sides(view, equal_counts)[side]

    def blocks() -> Iterator[tuple[slice, np.ndarray]]:
        for block in view.sample_blocks(view.n_references * view.n_queries * 8):
            yield block, view.reference_stat("phi", block)

    fit = view.memo(("lira-moments", side, equal_counts), lambda: moments(blocks, mask))

    def prior() -> Prior:
        fixed = gaussians(fit, blocks, mask, True, SIGMA_FLOOR).std
        rows = fixed[fit.count > 0]
        pooled = rows[0] ** 2 if rows.size else np.full(fit.mean.shape[1], SIGMA_FLOOR**2)
        return fit_prior(fit, pooled, strength)

    key = ("bavaria-prior", side, equal_counts, strength)
    return predictive(fit, view.memo(key, prior))


@register_attack(
    "bavaria-n",
    family="bavaria",
    needs=Needs(out_references=1),
    description="Brännvall (BaVarIA-n, offline): mean_q log Phi((phi - m_out)/sqrt(v_out)), "
    "NIG-stabilised variance",
    params=(EQUAL_COUNTS, PRIOR_STRENGTH),
)
def bavaria_n(view: TargetView, equal_counts: bool, prior_strength: float | None) -> np.ndarray:
    """Offline BaVarIA-n: LiRA's one-sided test with the NIG-stabilised OUT variance."""
    out = _side(view, 1, equal_counts, prior_strength)
    z = (view.target_stat("phi") - out.mean) / np.sqrt(out.variance)
    return query_mean(log_ndtr(z))


@register_attack(
    "bavaria-t",
    family="bavaria",
    needs=Needs(out_references=1),
    description="Brännvall (BaVarIA-t, offline): mean_q log of the OUT Student-t predictive CDF",
    params=(EQUAL_COUNTS, PRIOR_STRENGTH),
)
def bavaria_t(view: TargetView, equal_counts: bool, prior_strength: float | None) -> np.ndarray:
    """Offline BaVarIA-t: one-sided test under the OUT side's Student-t predictive."""
    out = _side(view, 1, equal_counts, prior_strength)
    z = (view.target_stat("phi") - out.mean) / t_scale(out)
    return query_mean(log_t_cdf(z, out.dof))


@register_attack(
    "bavaria-n-online",
    family="bavaria",
    needs=Needs(in_references=1, out_references=1),
    description="Brännvall (BaVarIA-n, online): mean_q log N(phi; IN) - log N(phi; OUT), "
    "NIG-stabilised variances",
    params=(EQUAL_COUNTS, PRIOR_STRENGTH),
)
def bavaria_n_online(
    view: TargetView, equal_counts: bool, prior_strength: float | None
) -> np.ndarray:
    """Online BaVarIA-n: LiRA's likelihood ratio with NIG-stabilised variances."""
    phi = view.target_stat("phi")
    sides = [_side(view, s, equal_counts, prior_strength) for s in (0, 1)]
    ins, out = (log_normal_pdf(phi, p.mean, np.sqrt(p.variance)) for p in sides)
    return query_mean(ins - out)


@register_attack(
    "bavaria-t-online",
    family="bavaria",
    needs=Needs(in_references=1, out_references=1),
    description="Brännvall (BaVarIA-t, online): mean_q log t_IN(phi) - log t_OUT(phi)",
    params=(EQUAL_COUNTS, PRIOR_STRENGTH),
)
def bavaria_t_online(
    view: TargetView, equal_counts: bool, prior_strength: float | None
) -> np.ndarray:
    """Online BaVarIA-t: ratio of the IN and OUT Student-t predictive densities."""
    phi = view.target_stat("phi")
    sides = [_side(view, s, equal_counts, prior_strength) for s in (0, 1)]
    ins, out = (log_t_pdf(phi, p.mean, t_scale(p), p.dof) for p in sides)
    return query_mean(ins - out)
