"""RMIA, the Robust Membership Inference Attack (Zarifzadeh, Liu, Reza Shokri, "Low-Cost
High-Power Membership Inference Attacks", ICML 2024).

`Pr(x|theta)` is the true-class probability averaged over the queries (statistic "prob_true").
`ratio(x) = Pr(x|theta_t) / Pr(x)`, the same for every population sample z, and the score of x
is the fraction of population samples it dominates: `mean_z [ratio(x) / ratio(z) > gamma]`.
Since ratio(z) > 0, `ratio(x)/ratio(z) > gamma <=> ratio(z) < ratio(x)/gamma`, so one sort of
the population ratios and a binary search per sample give all scores in O((N + Z) log Z).

Offline `rmia` (docs/algorithms.md §6):
`Pr(x) = ((1+a) mean_{OUT(x)} Pr(x|theta_r) + (1-a)) / 2`, the paper's linear approximation of
the missing IN models (its eq. for offline Pr(x)); the same formula for z, for which every
reference is OUT.

Online `rmia-online` (the paper's online setting, reference models half IN and half OUT for x):
`Pr(x) = (mean_{IN(x)} Pr(x|theta_r) + mean_{OUT(x)} Pr(x|theta_r)) / 2`. This equals the
paper's plain average over its references when they are exactly half IN, which is the paper's
design. We weight the two sides equally instead of averaging all references because with the
target left out of a balanced bank a target member has one IN reference fewer than a
non-member, and a plain average would then differ by the target's membership. Population
samples are OUT for every reference, so `Pr(z) = mean_r Pr(z|theta_r)` over the same
references, with no `a` interpolation. No trimmed mean is applied to the references: we did
not find one in the paper's definition of Pr(x), and with a handful of references per side it
would discard most of them. A sample without an
OUT reference (or, online, without an IN one) scores NaN.
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.base import Needs, register_attack
from miaudit.attacks.view import TargetView, side_means
from miaudit.errors import AttackError

_TINY = np.finfo(np.float64).tiny  # keeps a zero Pr(x) (only possible with a = 1) finite


def dominance(ratio_x: np.ndarray, ratio_z: np.ndarray, gamma: float) -> np.ndarray:
    """Fraction of `ratio_z [Z]` with `ratio_x / ratio_z > gamma`, for each of `ratio_x [N]`.

    Vectorised by sorting: `ratio_x / ratio_z > gamma <=> ratio_z < ratio_x / gamma` for
    ratio_z >= 0 and gamma > 0. NaN ratio_x gives NaN.
    """
    if not gamma > 0:
        raise AttackError(f"RMIA's gamma must be positive; got {gamma}.")
    ratio_z = np.sort(ratio_z[~np.isnan(ratio_z)])
    if ratio_z.size == 0:
        return np.full(ratio_x.shape, np.nan)
    nan = np.isnan(ratio_x)
    count = np.searchsorted(ratio_z, np.where(nan, 0.0, ratio_x) / gamma, side="left")
    return np.where(nan, np.nan, count / ratio_z.size)


def _ratio(p_target: np.ndarray, p_x: np.ndarray) -> np.ndarray:
    return p_target / np.maximum(p_x, _TINY)


@register_attack(
    "rmia",
    family="rmia",
    needs=Needs(out_references=1, population=True),
    description="Zarifzadeh et al. (offline): fraction of population z with LR(x, z) > gamma",
    a=0.3,
    gamma=2.0,
)
def rmia_offline(view: TargetView, a: float, gamma: float) -> np.ndarray:
    """Offline RMIA (Zarifzadeh et al. 2024), Pr(x) from OUT references via parameter `a`."""
    p_target = view.target_query_mean("prob_true")
    p_out = side_means(view, "prob_true").non_members  # [N]; NaN without OUT refs
    return offline_scores(p_target, p_out, view.population, a, gamma)


def offline_scores(p_target: np.ndarray, p_out: np.ndarray, population: np.ndarray, a: float,
                   gamma: float) -> np.ndarray:
    """Offline RMIA from the target's likelihood and the OUT references' mean likelihood of
    each sample [N]: Pr(x) = ((1 + a) p_out + (1 - a)) / 2, ratio = p_target / Pr(x), and the
    fraction of population z the ratio dominates by more than `gamma`."""
    ratio = offline_ratio(p_target, p_out, a)
    return dominance(ratio, ratio[population], gamma)


def offline_ratio(p_target: np.ndarray, p_out: np.ndarray, a: float) -> np.ndarray:
    """`Pr(x|theta_t) / Pr(x)` with offline RMIA's `Pr(x) = ((1 + a) p_out + (1 - a)) / 2`."""
    if not 0.0 <= a <= 1.0:
        raise AttackError(f"RMIA's offline parameter a must lie in [0, 1]; got {a}.")
    return _ratio(p_target, 0.5 * ((1.0 + a) * p_out + (1.0 - a)))


@register_attack(
    "informia",
    family="rmia",
    needs=Needs(out_references=1, population=True),
    description="Tao & Shokri (reconstructed): bits log2 LR(x) minus the population's mean",
    a=0.3,
)
def informia(view: TargetView, a: float) -> np.ndarray:
    """InfoRMIA (Tao & Shokri, ICLR 2026; docs/algorithms.md §19, reconstructed from the
    paper's summary): the information gain of x in bits, `log2(Pr(x|theta_t) / Pr(x))` with
    offline RMIA's Pr(x) (parameter `a`), minus the population's mean of the same quantity,
    the estimate of the KL term that removes the target's overall shift. A continuous score:
    no gamma, and no ties from counting population samples."""
    p_target = view.target_query_mean("prob_true")
    p_out = side_means(view, "prob_true").non_members
    bits = np.log2(np.maximum(offline_ratio(p_target, p_out, a), _TINY))
    population_bits = bits[view.population]
    population_bits = population_bits[np.isfinite(population_bits)]
    if population_bits.size == 0:
        return np.full(bits.shape, np.nan)
    return bits - population_bits.mean()


@register_attack(
    "rmia-online",
    family="rmia",
    needs=Needs(in_references=1, out_references=1, population=True),
    description="Zarifzadeh et al. (online): Pr(x) = (mean_IN + mean_OUT)/2 over references",
    gamma=2.0,
)
def rmia_online(view: TargetView, gamma: float) -> np.ndarray:
    """Online RMIA (Zarifzadeh et al. 2024): Pr(x) from IN and OUT references equally."""
    p_target = view.target_query_mean("prob_true")
    means = side_means(view, "prob_true")  # Pr(x|theta_r) averaged over IN, OUT, all refs
    ratio_x = _ratio(p_target, 0.5 * (means.members + means.non_members))
    population = view.population
    ratio_z = _ratio(p_target[population], means.every[population])
    return dominance(ratio_x, ratio_z, gamma)
