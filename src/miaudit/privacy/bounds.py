"""ε lower bounds from a threshold membership attack, with Clopper–Pearson confidence.

The rule of Jagielski, Ullman & Oprea 2020 ("Auditing Differentially Private Machine Learning:
How Private is Private SGD?") and Nasr, Song, Thakurta, Papernot & Carlini 2021 ("Adversary
Instantiation: Lower Bounds for Differentially Private Machine Learning"). An (ε, δ)-DP
mechanism forces every test that tells "member" from "non-member" to satisfy

    FPR · e^ε + FNR ≥ 1 − δ    and    FNR · e^ε + FPR ≥ 1 − δ,

so observed error rates certify ε ≥ log((1 − δ − FNR) / FPR) and ε ≥ log((1 − δ − FPR) / FNR).
With upper confidence bounds FPR⁺, FNR⁺ in place of the unknown true rates the certificate holds
with the confidence of those bounds. The test is "member iff score ≥ τ", and τ must not be chosen
on the counted samples: :func:`epsilon_lower_bound` chooses it on a disjoint selection set.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from miaudit.errors import ConfigError
from miaudit.privacy._checks import (
    check_alpha,
    check_count,
    check_delta,
    check_error_counts,
    check_scores,
)
from miaudit.records.bounds import EpsilonBound

__all__ = [
    "EpsilonBound",
    "clopper_pearson_upper",
    "epsilon_array",
    "epsilon_from_rates",
    "epsilon_from_counts",
    "choose_threshold",
    "epsilon_lower_bound",
    "split_halves",
]

METHOD = "clopper-pearson threshold"




def clopper_pearson_upper(k: ArrayLike, n: ArrayLike, level: float) -> np.ndarray | float:
    """One-sided Clopper–Pearson upper bound on a binomial rate, at confidence ``level``.

    The p with P[Binomial(n, p) ≤ k] = 1 − level, i.e. the ``level`` quantile of Beta(k + 1,
    n − k); 1 when k = n. Vectorised over ``k`` and ``n`` (broadcast); a float for scalars.
    """
    if not 0.0 < float(level) < 1.0:
        raise ConfigError(f"level must be in (0, 1), got {level!r}: the confidence, e.g. 0.975")
    k_arr, n_arr = np.broadcast_arrays(np.asarray(k), np.asarray(n))
    if not (np.issubdtype(k_arr.dtype, np.integer) and np.issubdtype(n_arr.dtype, np.integer)):
        raise ConfigError("k and n must be integer counts")
    if (n_arr < 1).any() or (k_arr < 0).any() or (k_arr > n_arr).any():
        raise ConfigError("counts must satisfy 0 <= k <= n and n >= 1")
    full = k_arr == n_arr
    # the Beta quantile is undefined at b = 0 (k = n): that bound is 1 by definition.
    # special.betaincinv is scipy.stats.beta.ppf's Boost routine, bit for bit, without
    # importing scipy.stats (~0.3 s)
    b = np.where(full, 1, n_arr - k_arr)
    upper = np.where(full, 1.0, special.betaincinv(k_arr + 1, b, level))
    return float(upper) if upper.ndim == 0 else upper


def epsilon_array(fp: ArrayLike, n0: ArrayLike, fn: ArrayLike, n1: ArrayLike,
                  delta: float = 0.0, alpha: float = 0.05) -> np.ndarray:
    """The bound for arrays of counts (broadcast); checks δ, α and 0 ≤ count ≤ n only.

    ε = max(0, log((1 − δ − FNR⁺)/FPR⁺), log((1 − δ − FPR⁺)/FNR⁺)), FPR⁺ and FNR⁺ each at level
    1 − α/2, so that both hold together with confidence 1 − α (a union bound). The core of
    :func:`epsilon_from_counts` and :func:`choose_threshold`; useful on many repetitions.
    """
    delta, alpha = check_delta(delta), check_alpha(alpha)
    fpr_up = np.asarray(clopper_pearson_upper(fp, n0, 1.0 - alpha / 2))
    fnr_up = np.asarray(clopper_pearson_upper(fn, n1, 1.0 - alpha / 2))
    return epsilon_from_rates(fpr_up, fnr_up, delta)


def epsilon_from_rates(fpr_upper: ArrayLike, fnr_upper: ArrayLike, delta: float) -> np.ndarray:
    """The bound's formula on upper bounds of the two error rates (already at their level):
    max(0, log((1 − δ − FNR⁺)/FPR⁺), log((1 − δ − FPR⁺)/FNR⁺)). For callers that tabulate
    the Clopper–Pearson bounds once and evaluate many thresholds (a run's attacks)."""
    fpr_up, fnr_up = np.asarray(fpr_upper), np.asarray(fnr_upper)
    result: np.ndarray = np.maximum(_log_ratio(1.0 - delta - fnr_up, fpr_up),
                                    _log_ratio(1.0 - delta - fpr_up, fnr_up))
    return result


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """max(0, log(num/den)); a term whose numerator is ≤ 0 contributes 0. den > 0 always
    (a Clopper–Pearson upper bound is positive)."""
    ok = num > den  # only a ratio above 1 raises the bound
    ratio = np.where(ok, num, 1.0) / np.where(ok, den, 1.0)
    return np.log(ratio)  # log 1 = 0 where not ok


def epsilon_from_counts(fp: int, n0: int, fn: int, n1: int, delta: float = 0.0,
                        alpha: float = 0.05, threshold: float | None = None) -> EpsilonBound:
    """The bound from counts at a threshold chosen without the counted samples.

    ``n1`` members (``fn`` of them scored below τ) and ``n0`` non-members (``fp`` of them at or
    above τ). ``threshold`` is only recorded.
    """
    fp, n0, fn, n1 = check_error_counts(fp, n0, fn, n1)
    delta, alpha = check_delta(delta), check_alpha(alpha)
    level = 1.0 - alpha / 2
    return EpsilonBound(
        epsilon=float(epsilon_array(fp, n0, fn, n1, delta, alpha)),
        method=METHOD, alpha=alpha, delta=delta, n_members=n1, n_nonmembers=n0, fp=fp, fn=fn,
        fpr_upper=float(clopper_pearson_upper(fp, n0, level)),
        fnr_upper=float(clopper_pearson_upper(fn, n1, level)),
        threshold=None if threshold is None else float(threshold),
    )


def _both_classes(flags: np.ndarray, what: str) -> tuple[int, int]:
    n1 = int(flags.sum())
    n0 = int(flags.size - n1)
    if n1 == 0 or n0 == 0:
        missing = "members" if n1 == 0 else "non-members"
        raise ConfigError(f"the {what} set has no {missing} (of {flags.size} samples): the "
                          "bound needs both members and non-members in it")
    return n1, n0


def choose_threshold(scores: ArrayLike, membership: ArrayLike, delta: float = 0.0,
                     alpha: float = 0.05) -> float:
    """The τ maximising the bound on the samples given (the selection set).

    Candidates are the distinct scores: "member iff score ≥ s" for each distinct s covers every
    way a threshold can cut these samples (the cut above the highest score certifies nothing).
    The samples are sorted once and the counts at every candidate are cumulative sums, so all
    candidates are scored in one vectorised call. Ties in the bound go to the highest τ.
    Never pass the samples you will count: use :func:`epsilon_lower_bound`.
    """
    delta, alpha = check_delta(delta), check_alpha(alpha)
    return best_threshold(scores, membership,
                          lambda fp, n0, fn, n1: epsilon_array(fp, n0, fn, n1, delta, alpha))


def best_threshold(scores: ArrayLike, membership: ArrayLike, objective: Any) -> float:
    """The distinct score s maximising ``objective(fp, n0, fn, n1)`` (arrays over candidates)
    for the rule "member iff score ≥ s"; ties go to the highest s."""
    s, m = check_scores(scores, membership, "selection")
    n1, n0 = _both_classes(m, "selection")
    order = np.argsort(-s, kind="stable")  # descending; -(-inf) = inf sorts first, fine
    ss, mm = s[order], m[order]
    tp = np.cumsum(mm)
    fp = np.cumsum(~mm)
    last = np.r_[ss[1:] != ss[:-1], True]  # last position of each run of tied scores
    values = objective(fp[last], n0, n1 - tp[last], n1)
    return float(ss[last][int(np.argmax(values))])


def count_at(tau: float, count_scores: ArrayLike,
             count_membership: ArrayLike) -> tuple[int, int, int, int]:
    """(fp, n0, fn, n1) of the rule "member iff score ≥ τ" on the counting set."""
    s, m = check_scores(count_scores, count_membership, "counting")
    n1, n0 = _both_classes(m, "counting")
    predicted = s >= tau
    return int((predicted & ~m).sum()), n0, int((~predicted & m).sum()), n1


def check_disjoint(select_scores: Any, count_scores: Any) -> None:
    """Refuse the one mistake visible from the arguments: the same array for both sets."""
    if select_scores is count_scores:
        raise ConfigError("the selection and counting scores are the same array: the threshold "
                          "must be chosen on samples disjoint from the counted ones (see "
                          "split_halves)")


def epsilon_lower_bound(select_scores: ArrayLike, select_membership: ArrayLike,
                        count_scores: ArrayLike, count_membership: ArrayLike,
                        delta: float = 0.0, alpha: float = 0.05) -> EpsilonBound:
    """The whole rule: τ from the selection set, the bound from counts on the counting set.

    The two sets must be disjoint samples (same attack, same model); only then are the counts
    binomial at a fixed τ and the confidence 1 − α honest. Without a separate selection set,
    split the audit samples with :func:`split_halves`.
    """
    check_disjoint(select_scores, count_scores)
    delta, alpha = check_delta(delta), check_alpha(alpha)
    tau = choose_threshold(select_scores, select_membership, delta, alpha)
    fp, n0, fn, n1 = count_at(tau, count_scores, count_membership)
    return epsilon_from_counts(fp, n0, fn, n1, delta, alpha, threshold=tau)


def split_halves(membership: ArrayLike | int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded disjoint split of sample indices into (selection, counting) halves.

    Given membership flags, members and non-members are split separately (stratified), so each
    half holds half of each class; an odd class gives its extra sample to the counting half.
    Given an int n, indices 0..n-1 are split without stratification. Returns sorted indices.
    """
    rng = np.random.default_rng(seed)
    if isinstance(membership, (int, np.integer)) and not isinstance(membership, bool):
        n = check_count(membership, "n (samples to split)", low=2)
        perm = rng.permutation(n)
        return np.sort(perm[: n // 2]), np.sort(perm[n // 2:])
    flags = np.asarray(membership)
    if flags.ndim != 1:
        raise ConfigError(f"membership must be a 1-D array of flags, got shape {flags.shape}")
    if flags.dtype != bool:
        if not np.isin(flags, (0, 1)).all():
            raise ConfigError("membership must be boolean or 0/1 flags (1 = member)")
        flags = flags.astype(bool)
    select, count = [], []
    for cls in (True, False):
        idx = rng.permutation(np.flatnonzero(flags == cls))
        if idx.size < 2:
            raise ConfigError(
                f"{idx.size} {'members' if cls else 'non-members'} cannot be split into a "
                "selection and a counting half: each needs at least one of each class"
            )
        select.append(idx[: idx.size // 2])
        count.append(idx[idx.size // 2:])
    return np.sort(np.concatenate(select)), np.sort(np.concatenate(count))
