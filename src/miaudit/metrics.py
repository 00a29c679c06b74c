"""Metrics for membership scores: ROC, AUC, TPR at fixed FPR with bootstrap CIs, and more.

Conventions used throughout:

- members are the positives; a higher score means "more likely a member";
- a NaN score means the attack could not score that sample: it is ranked below every other
  score (NaNs tie with each other), counted in ``n_unscorable`` and never dropped, so an
  attack that cannot score a member pays for it as a missed detection;
- a sample is *predicted member* iff ``score >= threshold`` (a NaN score never is). The same
  rule is used by :func:`best_accuracy_threshold` and the balanced accuracy in :func:`evaluate`.

Intervals (docs/algorithms.md §12): the AUC's is DeLong's, on the logit scale; TPR@FPR's is
the percentile interval of a stratified bootstrap over samples, each resample drawn exactly in
two random numbers (:func:`_bootstrap_tpr`), so neither costs more than one sort of the scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
from scipy.special import gammaln, ndtr

from miaudit.errors import AttackError

__all__ = [
    "roc",
    "auc",
    "tpr_at_fpr",
    "precision_at_recall",
    "best_accuracy_threshold",
    "balanced_accuracy",
    "support_warning",
    "evaluate",
]

def _key(value: float) -> str:
    """Dictionary key for a rate: ``0.001 -> "0.001"`` (Python's shortest repr)."""
    return repr(float(value))


def _check(scores: Any, members: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert inputs to (float64 scores, bool members); raise AttackError."""
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AttackError(f"scores must be numeric, got {type(scores).__name__}: {exc}") from exc
    m = np.asarray(members)
    if s.ndim != 1 or m.ndim != 1:
        raise AttackError(
            f"scores and members must be 1-D arrays, got shapes {s.shape} and {m.shape}"
        )
    if s.shape[0] != m.shape[0]:
        raise AttackError(
            f"scores and members differ in length ({s.shape[0]} vs {m.shape[0]}): "
            "pass one score and one membership flag per sample"
        )
    if m.dtype != bool:
        if m.size and not np.isin(m, (0, 1)).all():
            raise AttackError("members must be boolean or 0/1 flags (1 = member)")
        m = m.astype(bool)
    n1 = int(m.sum())
    if n1 == 0 or n1 == m.size:
        missing = "members" if n1 == 0 else "non-members"
        raise AttackError(
            f"no {missing} among the {m.size} samples: ROC metrics need both members and "
            "non-members in the evaluated set"
        )
    return s, m


def _groups(s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort descending with NaN last; return (order, group id per sorted position, starts)."""
    # -NaN is NaN: argsort puts it last. Not a stable sort (3x slower): only the groups of
    # equal scores matter, never the order inside one.
    order = np.argsort(-s)
    ss = s[order]
    nan = np.isnan(ss)
    change = (ss[1:] != ss[:-1]) & ~(nan[1:] & nan[:-1])
    gid = np.concatenate(([0], np.cumsum(change)))
    starts = np.concatenate(([0], np.flatnonzero(change) + 1))
    return order, gid, starts


def _sorted(s: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group id of each sorted position, membership in sort order, scores of the groups)."""
    order, gid, starts = _groups(s)
    return gid, m[order], s[order[starts]]


def _counts(gid: np.ndarray, mo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative true/false positives at each group (descending score)."""
    n_groups = int(gid[-1]) + 1
    pos = np.bincount(gid, weights=mo, minlength=n_groups).astype(np.int64)
    cnt = np.bincount(gid, minlength=n_groups).astype(np.int64)
    return np.cumsum(pos), np.cumsum(cnt - pos)


def _cumulative(s: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cumulative true/false positives at each distinct score (descending) and the scores."""
    gid, mo, values = _sorted(s, m)
    return (*_counts(gid, mo), values)


def roc(scores: Any, members: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC curve over all distinct thresholds, members as positives.

    Returns ``(fpr, tpr, thresholds)`` exactly as
    ``sklearn.metrics.roc_curve(members, scores, drop_intermediate=False)`` on finite scores:
    a first point ``(0, 0)`` at threshold ``+inf``, then one point per distinct score in
    decreasing order. Unscorable (NaN) samples form the last point, with threshold ``-inf``.
    """
    s, m = _check(scores, members)
    tps, fps, values = _cumulative(s, m)
    thresholds = np.concatenate(([np.inf], values))
    thresholds[np.isnan(thresholds)] = -np.inf
    fpr = np.concatenate(([0], fps)) / fps[-1]
    tpr = np.concatenate(([0], tps)) / tps[-1]
    return fpr, tpr, thresholds


def _auc_from_cumulative(tps: np.ndarray, fps: np.ndarray) -> np.ndarray:
    """AUC (ties count half) from cumulative counts along the last axis, exact integer sums."""
    neg = np.diff(fps, prepend=0, axis=-1)
    tps_prev = np.concatenate((np.zeros_like(tps[..., :1]), tps[..., :-1]), axis=-1)
    twice_area = (neg * (tps_prev + tps)).sum(axis=-1)
    result: np.ndarray = twice_area / (2.0 * tps[..., -1] * fps[..., -1])
    return result


def auc(scores: Any, members: Any) -> float:
    """Area under the ROC curve; equals ``sklearn.metrics.roc_auc_score`` (ties count half)."""
    s, m = _check(scores, members)
    tps, fps, _ = _cumulative(s, m)
    return float(_auc_from_cumulative(tps, fps))


def tpr_at_fpr(fpr: Any, tpr: Any, target_fpr: float) -> float:
    """The largest TPR among ROC points with FPR <= ``target_fpr`` (LiRA's convention).

    No interpolation: a curve with points at FPR 0.5% and 2% gives TPR@1% = TPR at 0.5%.
    Returns 0.0 when no point qualifies.
    """
    fpr = np.asarray(fpr, dtype=np.float64)
    tpr = np.asarray(tpr, dtype=np.float64)
    if fpr.shape != tpr.shape:
        raise AttackError(f"fpr and tpr differ in shape ({fpr.shape} vs {tpr.shape})")
    ok = fpr <= target_fpr
    return float(tpr[ok].max()) if ok.any() else 0.0


def precision_at_recall(scores: Any, members: Any, recall: float) -> float:
    """Precision at the highest threshold whose recall (TPR) reaches ``recall``.

    This is the precision of the operating point one would actually use to detect that
    fraction of the members (not the interpolated maximum over lower thresholds).
    """
    _check_recall(recall)
    s, m = _check(scores, members)
    return _precision_at(*_cumulative(s, m)[:2], recall)


def _check_recall(recall: float) -> None:
    if not 0.0 < recall <= 1.0:
        raise AttackError(f"recall must be in (0, 1], got {recall}")


def _precision_at(tps: np.ndarray, fps: np.ndarray, recall: float) -> float:
    first = int(np.argmax(tps / tps[-1] >= recall))
    return float(tps[first] / (tps[first] + fps[first]))


def best_accuracy_threshold(scores: Any, members: Any) -> float:
    """Threshold maximising accuracy of the rule "member iff score >= threshold".

    Callers must choose it on PUBLIC / shadow data (Watson et al., ICLR 2022, §4.1: a half
    split of the public pool) and then apply it to the target: it must never be chosen on the
    samples being evaluated, or the reported accuracy is optimistically biased.

    Candidates are midpoints between consecutive distinct finite scores (a decision stump, so
    the threshold transfers to unseen scores), the smallest finite score (everyone scorable
    is a member) and the next float above the largest (nobody is). Ties in accuracy go to the
    highest threshold (fewest positive predictions). NaN scores are never predicted member.
    """
    s, m = _check(scores, members)
    tps, fps, values = _cumulative(s, m)
    finite_groups = int(np.count_nonzero(~np.isnan(values)))
    n0 = int(fps[-1])
    if finite_groups == 0:  # nothing scorable: nobody can be predicted member
        return float("inf")
    # predict member for groups 0..k (k = -1: nobody)
    correct = np.concatenate(([n0], tps[:finite_groups] + (n0 - fps[:finite_groups])))
    best = int(np.argmax(correct)) - 1
    v = values[:finite_groups]
    if best < 0:
        return float(np.nextafter(v[0], np.inf))
    if best == finite_groups - 1:
        return float(v[best])
    mid = v[best] / 2 + v[best + 1] / 2
    # guard against midpoint rounding onto the lower value (adjacent floats)
    return float(mid if mid > v[best + 1] else v[best])


def balanced_accuracy(scores: Any, members: Any, threshold: float) -> float:
    """Mean of TPR and TNR for the rule "member iff score >= threshold" (NaN: non-member)."""
    s, m = _check(scores, members)
    with np.errstate(invalid="ignore"):
        pred = s >= threshold
    return float(0.5 * (pred[m].mean() + (~pred[~m]).mean()))


def support_warning(n_nonmembers: int, fpr: float) -> str | None:
    """Warning text when TPR@``fpr`` rests on fewer than ten expected false positives."""
    expected = n_nonmembers * fpr
    if expected >= 10 * (1 - 1e-12):
        return None
    return (
        f"TPR@{fpr * 100:g}% FPR rests on {expected:.3g} expected false "
        f"{'positive' if expected == 1 else 'positives'} "
        f"(n={n_nonmembers:,} non-members < {10 / fpr:,.0f}): treat as indicative"
    )


def false_positive_allowance(n0: int, fpr: float) -> int:
    """The most false positives k with ``k / n0 <= fpr`` in floating point (the ROC's rule)."""
    k = min(n0, int(math.floor(fpr * n0)))
    while k < n0 and (k + 1) / n0 <= fpr:
        k += 1
    while k > 0 and k / n0 > fpr:
        k -= 1
    return k


def _bootstrap_tpr(
    gid: np.ndarray, mo: np.ndarray, fprs: Sequence[float], n_bootstrap: int, seed: int
) -> np.ndarray:
    """TPR@FPR [B, len(fprs)] of B stratified bootstrap resamples, drawn exactly, in O(B).

    A resample draws n1 members and n0 non-members with replacement (the classes separately,
    so both are always present). Its TPR@f is read at the last ROC point with at most
    k = floor(f n0) false positives: the point just above the score of the (k+1)-th
    highest-ranked non-member draw. Draw positions (in descending score order) are iid uniform
    on 0..n0-1, so the (k+1)-th smallest is floor(n0 U) with U ~ Beta(k+1, n0-k), the
    (k+1)-th order statistic of n0 uniforms. Given that point, with K members scoring
    strictly above it, the members drawn there are Binomial(n1, K/n1), independently (the
    member draws are independent of the non-member draws). So each resample costs two draws
    instead of a sort or a pass over the samples, with exactly the distribution of
    resampling the samples and computing the TPR from scratch.
    """
    n1, n0 = int(mo.sum()), int((~mo).sum())
    # members in the groups above group g: above[g]; group of each non-member, by rank
    above = np.concatenate(([0], np.cumsum(np.bincount(gid, weights=mo).astype(np.int64))))
    nonmember_group = gid[~mo]
    rng = np.random.default_rng(seed)
    out = np.empty((n_bootstrap, len(fprs)))
    for j, f in enumerate(fprs):
        k = false_positive_allowance(n0, f)
        if k >= n0:  # every point qualifies, the last one included: all members
            out[:, j] = 1.0
            continue
        u = rng.beta(k + 1, n0 - k, size=n_bootstrap)
        rank = np.minimum((u * n0).astype(np.int64), n0 - 1)
        members_above = above[nonmember_group[rank]]
        out[:, j] = rng.binomial(n1, members_above / n1) / n1
    return out


def _auc_interval(tps: np.ndarray, fps: np.ndarray, confidence: float) -> list[float]:
    """DeLong's interval for the AUC (DeLong, DeLong & Clarke-Pearson, Biometrics 1988),
    computed on the logit scale (Pepe, 2003, §5.2.3) so that it stays inside [0, 1].

    The AUC is the mean of the members' placements V10 (share of non-members scored below,
    ties half) and of the non-members' placements V01 (share of members above, ties half);
    its variance is var(V10)/n1 + var(V01)/n0, read off the cumulative counts of the groups.
    """
    n1, n0 = int(tps[-1]), int(fps[-1])
    pos = np.diff(tps, prepend=0)
    neg = np.diff(fps, prepend=0)
    v10 = (n0 - fps + 0.5 * neg) / n0  # a member in each group
    v01 = (tps - 0.5 * pos) / n1  # a non-member in each group
    # sums of products, not np.dot: BLAS threads cost more than they save at this size
    area = float((pos * v10).sum() / n1)
    var = ((pos * (v10 - area) ** 2).sum() / max(n1 - 1, 1) / n1
           + (neg * (v01 - area) ** 2).sum() / max(n0 - 1, 1) / n0)
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    if not 0.0 < area < 1.0 or var <= 0.0:
        return [area, area]  # every resample of the data would give this AUC too
    logit = math.log(area / (1 - area))
    half = z * math.sqrt(var) / (area * (1 - area))
    return [1 / (1 + math.exp(-(logit - half))), 1 / (1 + math.exp(-(logit + half)))]


def _interval(values: np.ndarray, confidence: float) -> list[float]:
    lo, hi = np.quantile(values, [(1 - confidence) / 2, (1 + confidence) / 2])
    return [float(lo), float(hi)]


def evaluate(
    scores: Any,
    members: Any,
    *,
    fprs: Sequence[float] = (0.001, 0.01),
    n_bootstrap: int = 200,
    confidence: float = 0.95,
    seed: int = 0,
    threshold: float | None = None,
    recalls: Sequence[float] = (0.5, 0.9),
) -> dict[str, Any]:
    """All metrics of one attack's scores as a JSON-serialisable dict.

    Keys: ``auc``, ``auc_ci``, ``tpr_at_fpr`` / ``tpr_at_fpr_ci`` / ``fpr_support`` (keyed by
    ``repr(fpr)``, e.g. ``"0.001"``), ``n_members``, ``n_nonmembers``, ``n_unscorable``,
    ``precision_at_recall`` (keyed by ``repr(recall)``), ``balanced_accuracy`` and
    ``threshold``. ``tpr_at_fpr_ci``: percentile intervals of a stratified, seeded bootstrap
    over samples, ``n_bootstrap`` resamples; ``auc_ci``: DeLong's interval on the logit scale
    (both ``None`` when ``n_bootstrap`` is 0). ``threshold`` must come from public/shadow data
    (see :func:`best_accuracy_threshold`); balanced accuracy is ``None`` without it.

    The pipeline types this dict once (:meth:`miaudit.records.outcomes.AttackMetrics.from_dict`,
    with the attack's privacy bounds); metrics.json is that record's ``to_dict()``, these same
    keys in this order.
    """
    s, m = _check(scores, members)
    fprs = [float(f) for f in fprs]
    for f in fprs:
        if not 0.0 < f <= 1.0:
            raise AttackError(f"target FPRs must be in (0, 1], got {f}")
    if not 0.0 < confidence < 1.0:
        raise AttackError(f"confidence must be in (0, 1), got {confidence}")
    if n_bootstrap < 0:
        raise AttackError(f"n_bootstrap must be >= 0, got {n_bootstrap}")
    for r in recalls:
        _check_recall(r)
    n1, n0 = int(m.sum()), int((~m).sum())
    gid, mo, _ = _sorted(s, m)  # one sort serves every figure
    tps, fps = _counts(gid, mo)
    fpr = np.concatenate(([0], fps)) / n0
    tpr = np.concatenate(([0], tps)) / n1
    auc_ci: list[float] | None = None
    tpr_ci: dict[str, list[float] | None] = {_key(f): None for f in fprs}
    if n_bootstrap > 0:
        auc_ci = _auc_interval(tps, fps, confidence)
        boot_tpr = _bootstrap_tpr(gid, mo, fprs, n_bootstrap, seed)
        tpr_ci = {_key(f): _interval(boot_tpr[:, j], confidence) for j, f in enumerate(fprs)}
    bal = None
    if threshold is not None:
        bal = balanced_accuracy(s, m, threshold)
    return {
        "auc": float(_auc_from_cumulative(tps, fps)),
        "auc_ci": auc_ci,
        "tpr_at_fpr": {_key(f): tpr_at_fpr(fpr, tpr, f) for f in fprs},
        "tpr_at_fpr_ci": tpr_ci,
        "fpr_support": {
            _key(f): {
                "n_nonmembers": n0,
                "expected_false_positives": float(round(n0 * f, 9)),
                "warning": support_warning(n0, f),
            }
            for f in fprs
        },
        "n_members": n1,
        "n_nonmembers": n0,
        "n_unscorable": int(np.isnan(s).sum()),
        "precision_at_recall": {_key(r): _precision_at(tps, fps, r) for r in recalls},
        "balanced_accuracy": bal,
        "threshold": None if threshold is None else float(threshold),
    }


# The null distributions of the figures (the verdict's test, miaudit.verdict.significance):
# under the null the membership labels are exchangeable given the scores.


def tpr_null_p_value(tpr: float, n_members: int, n_nonmembers: int, fpr: float) -> float:
    """P(TPR at FPR ``fpr`` >= ``tpr``) when membership is independent of the scores."""
    if n_members <= 0 or n_nonmembers <= 0:
        return 1.0
    allowed = false_positive_allowance(n_nonmembers, fpr)
    if allowed >= n_nonmembers:
        return 1.0  # every member is above such a point: no evidence either way
    hits = int(round(tpr * n_members))
    if hits <= 0:
        return 1.0
    return min(1.0, max(0.0, negative_hypergeometric_sf(hits, n_members, n_nonmembers,
                                                        allowed + 1)))


def negative_hypergeometric_sf(hits: int, n_members: int, n_nonmembers: int, stops: int
                               ) -> float:  # fmt: skip
    """P(K >= hits): K the members drawn before the ``stops``-th non-member, drawing without
    replacement from ``n_members`` members and ``n_nonmembers`` non-members (scipy's
    ``nhypergeom(n_members + n_nonmembers, n_members, stops).sf(hits - 1)``, from
    ``scipy.special`` alone: scipy.stats costs half a second to import)."""
    k = np.arange(hits, n_members + 1, dtype=np.float64)
    if k.size == 0:
        return 0.0
    r, n, total = float(stops), float(n_members), float(n_members + n_nonmembers)
    # pmf(k) = C(k + r - 1, k) C(total - r - k, n - k) / C(total, n)
    log_pmf = (_log_comb(k + r - 1, k) + _log_comb(total - r - k, n - k)
               - _log_comb(total, n))
    return float(np.exp(log_pmf).sum())


def _log_comb(n: np.ndarray | float, k: np.ndarray | float) -> np.ndarray:
    result: np.ndarray = (gammaln(np.add(n, 1)) - gammaln(np.add(k, 1))
                          - gammaln(np.subtract(n, k) + 1))
    return result


def auc_null_p_value(auc: float, n_members: int, n_nonmembers: int) -> float:
    """One-sided P(AUC >= ``auc``) under the null, Mann–Whitney's normal approximation."""
    if n_members <= 0 or n_nonmembers <= 0:
        return 1.0
    sd = math.sqrt((n_members + n_nonmembers + 1) / (12.0 * n_members * n_nonmembers))
    return float(ndtr(-(auc - 0.5) / sd))
