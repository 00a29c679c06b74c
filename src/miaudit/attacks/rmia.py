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

Ties (`tie_break`, both variants; `dominance`): the paper's score is a count, and on small
populations most samples share one value (84 % of `miaudit demo`'s). `tie_break: "ratio"` (the
default) orders samples with equal counts by their ratio and never reorders different counts,
so one target's samples rank exactly as their ratio does; `"none"` is the paper's score
(docs/algorithms.md §6, EXPERIMENTS.md "RMIA ties").

Temperature (`temperature`, rmia, rmia-online and informia): `Pr(x|theta)` is
`softmax(logits / T)[y]` averaged over queries, as in the paper's configurations and LeakPro
(T = 2 there). T = 1 is the model's own probability, read from the bank's cached statistic;
any other T recomputes it from the logits (`tempered_prob_true`). A sequence bank's logits are
a derived two-class view of the sequence likelihood, not a vocabulary, so T != 1 is refused
there (lm-rmia explains why it has no temperature).
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks.params import Param
from miaudit.attacks.registry import Needs, register_attack
from miaudit.attacks.view import SideMeans, TargetView, mean_over_out, side_means
from miaudit.errors import AttackError
from miaudit.signals.statistics import compute_statistics

_TINY = np.finfo(np.float64).tiny  # keeps a zero Pr(x) (only possible with a = 1) finite


TIE_BREAKS = ("none", "ratio")
# The default of rmia, rmia-online and `dominance` (EXPERIMENTS.md, "RMIA ties"); lm-rmia,
# through `offline_scores`, keeps the paper's score ("none") until it is measured on text.
TIE_BREAK = "ratio"

OFFLINE_A = Param("a", 0.3, "float", "offline Pr(x) = ((1 + a) mean_OUT Pr(x|theta_r) + "
                  "(1 - a)) / 2: the linear stand-in for the IN references offline RMIA lacks",
                  low=0.0, high=1.0)
GAMMA = Param("gamma", 2.0, "float", "x dominates a population sample z when "
              "ratio(x) / ratio(z) > gamma", low=0.0, low_open=True)
TIE_BREAK_PARAM = Param("tie_break", TIE_BREAK, "str", "ratio: equal counts ordered by "
                        "ratio(x), different counts never swapped; none: the paper's count",
                        choices=TIE_BREAKS)
# The default of rmia, rmia-online and informia: measured on development banks only
# (bench/rmia_temperature.md).
TEMPERATURE_DEFAULT = 1.0
TEMPERATURE = Param("temperature", TEMPERATURE_DEFAULT, "float", "Pr(x|theta) = "
                    "softmax(logits / temperature)[y], averaged over queries (the RMIA "
                    "paper's configurations use 2; 1 is the model's own probability)",
                    low=0.0, low_open=True)


# The RMIA paper's offline configuration as its code runs it on tabular data: Zarifzadeh et
# al.'s attack configs for Purchase-100 (privacytrustlab/ml_privacy_meter, commit d327341,
# research/2024_rmia/attack_configs/purchase100/rmia_offline_2_ref_models.yaml and
# rmia_offline_127_ref_models.yaml: signal softmax_relative, temperature 2.0, offline_a 0.2,
# gamma 2.0) with the paper's count as the score (research/2024_rmia/main.py: the fraction of
# z with LR > gamma, no tie-break). Their CIFAR-10 configs use offline_a 0.3 with a Taylor
# soft-margin signal miaudit does not have, and every config takes a 0.2-trimmed mean over
# the references (one of 6 cut on each side here; miaudit's is the plain mean). `rmia-paper`
# is `rmia` with these defaults.
PAPER_OFFLINE = {"a": 0.2, "gamma": 2.0, "tie_break": "none", "temperature": 2.0}


def tempered_prob_true(view: TargetView, temperature: float) -> tuple[np.ndarray, SideMeans]:
    """The target's `Pr(x|theta_t)` [N] and the references' IN, OUT and all means of
    `Pr(x|theta_r)` (`SideMeans`), with `Pr(x|theta) = mean_q softmax(z_q / T)[y]`.

    T = 1 reads the bank's cached "prob_true" (the same pass every attack shares). Any other
    T divides the logits by T in float64 and runs them through the same numerically careful
    statistics pass (`compute_statistics`), one model and block of samples at a time, so no
    [M, N, Q, C] float64 copy is ever made; the result is shared by every attack on this view
    with that T (`view.memo`)."""
    if not temperature > 0:
        raise AttackError(f"RMIA's temperature must be positive; got {temperature}.")
    if temperature == 1.0:
        return view.target_query_mean("prob_true"), side_means(view, "prob_true")
    if view.has_sequences:
        raise AttackError(
            "RMIA's temperature applies to a classifier's logits; this is a sequence bank, "
            "whose logits are a derived two-class view of the sequence likelihood, not the "
            "vocabulary's, so no faithful tempered probability exists (lm-rmia explains why "
            "the bank cannot give one). Use temperature: 1 here."
        )
    result: tuple[np.ndarray, SideMeans] = view.memo(("tempered_prob_true", float(temperature)),
                                                     lambda: _tempered(view, float(temperature)))
    return result


def _tempered(view: TargetView, temperature: float) -> tuple[np.ndarray, SideMeans]:
    per_sample = view.n_queries * view.n_classes * 8 * 2  # the float64 block and its workspace

    def model_probs(logits: np.ndarray) -> np.ndarray:
        probs = np.empty(view.n_samples)
        for block in view.sample_blocks(per_sample):
            scaled = np.asarray(logits[block], dtype=np.float64) / temperature
            stats = compute_statistics(scaled[None], view.labels[block], ("prob_true",))
            probs[block] = stats["prob_true"][0].mean(axis=1)
        return probs

    target = model_probs(view.target_logits())
    references = np.stack([model_probs(view.reference_logits(r))
                           for r in range(view.n_references)]) if view.n_references else (
        np.empty((0, view.n_samples)))
    means = [mean_over_out(references, mask) for mask in
             (view.reference_membership, view.out_mask(), view.reference_available)]
    for array in (target, *means):
        array.flags.writeable = False
    return target, SideMeans(*means)


def dominance(ratio_x: np.ndarray, ratio_z: np.ndarray, gamma: float,
              tie_break: str = TIE_BREAK) -> np.ndarray:
    """Fraction of `ratio_z [Z]` with `ratio_x / ratio_z > gamma`, for each of `ratio_x [N]`.

    Vectorised by sorting: `ratio_x / ratio_z > gamma <=> ratio_z < ratio_x / gamma` for
    ratio_z >= 0 and gamma > 0. NaN ratio_x gives NaN.

    `tie_break="none"` is the paper's score, `count / Z` with `count = |{z : z < t}|` and
    `t = ratio_x / gamma`. `tie_break="ratio"` adds where `t` lies between the two population
    ratios around it, so that samples with the same count are ordered by their ratio and
    samples with different counts never swap: `(count + u) / Z`, with
    `u = (t - z_(count)) / (z_(count+1) - z_(count))` in (0, 1] (z_(k) the k-th smallest
    population ratio, z_(0) = 0, so u = t / z_(1) in [0, 1] for count 0) and, above the
    largest, `u = 1 - z_(Z) / t` in (0, 1]. That is the linear interpolation of the
    population's empirical CDF at `t`: it depends on x and the population only, stays within
    one count step `1 / Z` above the paper's score, and never rises with gamma
    (docs/algorithms.md §6).
    """
    if not gamma > 0:
        raise AttackError(f"RMIA's gamma must be positive; got {gamma}.")
    if tie_break not in TIE_BREAKS:
        raise AttackError(f"RMIA's tie_break must be one of {', '.join(TIE_BREAKS)}; got "
                          f"{tie_break!r}.")
    ratio_z = np.sort(ratio_z[~np.isnan(ratio_z)])
    if ratio_z.size == 0:
        return np.full(ratio_x.shape, np.nan)
    nan = np.isnan(ratio_x)
    t = np.where(nan, 0.0, ratio_x) / gamma
    count = np.searchsorted(ratio_z, t, side="left")
    if tie_break == "none":
        return np.where(nan, np.nan, count / ratio_z.size)
    return np.where(nan, np.nan, (count + _within_step(t, count, ratio_z)) / ratio_z.size)


def _within_step(t: np.ndarray, count: np.ndarray, ratio_z: np.ndarray) -> np.ndarray:
    """Where `t` lies in its count's step, in [0, 1]: 0 at the population ratio below it
    (0 for count 0), 1 at the one above it (`count` = |{z < t}|, `ratio_z` sorted, t >= 0)."""
    size = ratio_z.size
    lo = np.where(count > 0, ratio_z[np.maximum(count - 1, 0)], 0.0)
    inside = count < size
    hi = ratio_z[np.minimum(count, size - 1)]
    with np.errstate(divide="ignore", invalid="ignore"):
        between = (t - lo) / (hi - lo)  # lo < t <= hi (lo = 0 <= t for count 0)
        above = 1.0 - ratio_z[-1] / t  # t > the largest population ratio (>= 0)
    u = np.where(inside, between, above)
    # hi == lo only for count 0 with z_(1) = 0, i.e. t = 0; above: t > z_(Z) >= 0, so t > 0
    result: np.ndarray = np.clip(np.nan_to_num(u, nan=0.0), 0.0, 1.0)
    return result


def _ratio(p_target: np.ndarray, p_x: np.ndarray) -> np.ndarray:
    result: np.ndarray = p_target / np.maximum(p_x, _TINY)
    return result


@register_attack(
    "rmia",
    family="rmia",
    needs=Needs(out_references=1, population=True),
    description="Zarifzadeh et al. (offline): fraction of population z with LR(x, z) > gamma",
    params=(OFFLINE_A, GAMMA, TIE_BREAK_PARAM, TEMPERATURE),
)
@register_attack(
    "rmia-paper",
    family="rmia",
    needs=Needs(out_references=1, population=True, classifier=True),  # T = 2: logits
    description="rmia at its paper's offline configuration (T = 2, a = 0.2, gamma = 2, "
                "the paper's count)",
    params=(OFFLINE_A.with_default(PAPER_OFFLINE["a"]),
            GAMMA.with_default(PAPER_OFFLINE["gamma"]),
            TIE_BREAK_PARAM.with_default(PAPER_OFFLINE["tie_break"]),
            TEMPERATURE.with_default(PAPER_OFFLINE["temperature"])),
)
def rmia_offline(view: TargetView, a: float, gamma: float, tie_break: str,
                 temperature: float) -> np.ndarray:
    """Offline RMIA (Zarifzadeh et al. 2024), Pr(x) from OUT references via parameter `a`,
    probabilities at softmax temperature `temperature`."""
    p_target, means = tempered_prob_true(view, temperature)
    p_out = means.non_members  # [N]; NaN without OUT refs
    return offline_scores(p_target, p_out, view.population, a, gamma, tie_break)


def offline_scores(p_target: np.ndarray, p_out: np.ndarray, population: np.ndarray, a: float,
                   gamma: float, tie_break: str = "none") -> np.ndarray:
    """Offline RMIA from the target's likelihood and the OUT references' mean likelihood of
    each sample [N]: Pr(x) = ((1 + a) p_out + (1 - a)) / 2, ratio = p_target / Pr(x), and the
    fraction of population z the ratio dominates by more than `gamma` (`tie_break`: see
    `dominance`; "none", the paper's score, unless the caller asks: lm-rmia does not)."""
    ratio = offline_ratio(p_target, p_out, a)
    return dominance(ratio, ratio[population], gamma, tie_break)


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
    params=(OFFLINE_A, TEMPERATURE),
)
def informia(view: TargetView, a: float, temperature: float) -> np.ndarray:
    """InfoRMIA (Tao & Shokri, ICLR 2026; docs/algorithms.md §19, reconstructed from the
    paper's summary): the information gain of x in bits, `log2(Pr(x|theta_t) / Pr(x))` with
    offline RMIA's Pr(x) (parameter `a`), minus the population's mean of the same quantity,
    the estimate of the KL term that removes the target's overall shift. A continuous score:
    no gamma, and no ties from counting population samples. `temperature` as in rmia."""
    p_target, means = tempered_prob_true(view, temperature)
    p_out = means.non_members
    bits = np.log2(np.maximum(offline_ratio(p_target, p_out, a), _TINY))
    population_bits = bits[view.population]
    population_bits = population_bits[np.isfinite(population_bits)]
    if population_bits.size == 0:
        return np.full(bits.shape, np.nan)
    result: np.ndarray = bits - population_bits.mean()
    return result


@register_attack(
    "rmia-online",
    family="rmia",
    needs=Needs(in_references=1, out_references=1, population=True),
    description="Zarifzadeh et al. (online): Pr(x) = (mean_IN + mean_OUT)/2 over references",
    params=(GAMMA, TIE_BREAK_PARAM, TEMPERATURE),
)
def rmia_online(view: TargetView, gamma: float, tie_break: str,
                temperature: float) -> np.ndarray:
    """Online RMIA (Zarifzadeh et al. 2024): Pr(x) from IN and OUT references equally,
    probabilities at softmax temperature `temperature`."""
    # Pr(x|theta_r) averaged over IN, OUT and all references
    p_target, means = tempered_prob_true(view, temperature)
    ratio_x = _ratio(p_target, 0.5 * (means.members + means.non_members))
    population = view.population
    ratio_z = _ratio(p_target[population], means.every[population])
    return dominance(ratio_x, ratio_z, gamma, tie_break)
