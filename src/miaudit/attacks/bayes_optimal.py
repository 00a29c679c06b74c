"""BASE, the Bayes-optimal approximation of Lassila, Östman, Ngo & Graell i Amat ("Practical
Bayes-Optimal Membership Inference Attacks", NeurIPS 2025, arXiv 2505.24089), on i.i.d. data.

BASE builds on the Bayesian decision-theoretic framework of Sablayrolles et al. ("White-box vs
Black-box: Bayes Optimal Strategies for Membership Inference", ICML 2019): if the trained
parameters follow `p(theta | D) ∝ exp(-(1/T) sum_i l(theta, z_i))`, the posterior membership
probability of z is `sigmoid(s(z, theta) + log(lambda / (1 - lambda)))` with

    s(z, theta) = (tau(z) - l(theta, z)) / T,
    tau(z)      = -T log E_{theta' ~ models without z} exp(-l(theta', z) / T),

and BASE estimates the expectation by Monte Carlo over reference models trained without z:

    score(x) = -l_t(x) / T - log mean_{r in OUT(x)} exp(-l_r(x) / T)      (docs/algorithms.md §17)

The Bayes-optimal decision thresholds the score at `-log(lambda / (1 - lambda))` (0 for a
balanced prior); miaudit reports the score and sweeps every threshold, so lambda never enters.

Choices (the paper's text was not reachable here; see docs): the loss is the cross-entropy of
the query-averaged true-class probability, `l = -log mean_q p_y` (so `exp(-l) = Pr(x|theta)`,
RMIA's likelihood), and `T = 1` by default. At T = 1 the score is `log(Pr(x|theta_t) / Pr(x))`
with `Pr(x) = mean_OUT Pr(x|theta_r)`: offline RMIA's ratio at `a = 1`, and RMIA's score is
a non-decreasing function of it (the fraction of population ratios it dominates by gamma), the
equivalence the paper states. BASE needs no population. Only OUT references enter (the
expectation is over models without z); a sample without one scores NaN. Computed in logs
(logsumexp over references of `-loss / T`), a block of samples at a time.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from miaudit.attacks.params import Param
from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import TargetView
from miaudit.errors import AttackError


def log_likelihood(loss: np.ndarray) -> np.ndarray:
    """`log mean_q exp(-loss[..., q])`: the log of the query-averaged true-class probability,
    without underflow (float64, the query axis removed)."""
    result: np.ndarray = logsumexp(-loss, axis=-1) - np.log(loss.shape[-1])
    return result


def base_scores(
    log_target: np.ndarray, log_refs: np.ndarray, out: np.ndarray, temperature: float
) -> np.ndarray:
    """BASE from log-likelihoods: target [N], references [R, N], OUT mask [R, N]:
    `log_target / T - log mean_{OUT} exp(log_refs / T)`; NaN without an OUT reference."""
    count = out.sum(axis=0)
    scaled = np.where(out, log_refs / temperature, -np.inf)
    with np.errstate(divide="ignore"):
        log_mean = logsumexp(scaled, axis=0) - np.log(np.maximum(count, 1))
    return np.where(count > 0, log_target / temperature - log_mean, np.nan)


@register_attack(
    "base",
    family="bayes-optimal",
    needs=Needs(out_references=1),
    description="Lassila et al. (BASE): -l_t/T - log mean_OUT exp(-l_r/T), l = -log mean_q p_y",
    params=(Param("temperature", 1.0, "float", "T of the score -l_t/T - log mean_OUT "
                  "exp(-l_r/T), Sablayrolles' temperature", low=0.0, low_open=True),),
)
def base(view: TargetView, temperature: float) -> np.ndarray:
    """BASE (Lassila et al. 2025): Sablayrolles' Bayes-optimal score, tau by Monte Carlo over
    the OUT references."""
    if not temperature > 0:
        raise AttackError(f"BASE's temperature must be positive; got {temperature}.")
    log_target = log_likelihood(view.target_stat("loss"))
    out = view.out_mask()
    scores = np.empty(view.n_samples)
    for block in view.sample_blocks(view.n_references * view.n_queries * 8 * 3):
        log_refs = log_likelihood(view.reference_stat("loss", block))  # [R, b]
        scores[block] = base_scores(log_target[block], log_refs, out[:, block], temperature)
    return scores
