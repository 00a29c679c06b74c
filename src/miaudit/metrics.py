"""Metrics for membership scores: ROC, AUC, TPR at fixed FPR with bootstrap CIs, and more.

Conventions used throughout:

- members are the positives; a higher score means "more likely a member";
- a NaN score means the attack could not score that sample: it is ranked below every other
  score (NaNs tie with each other), counted in ``n_unscorable`` and never dropped, so an
  attack that cannot score a member pays for it as a missed detection;
- a sample is *predicted member* iff ``score >= threshold`` (a NaN score never is). The same
  rule is used by :func:`best_accuracy_threshold` and the balanced accuracy in :func:`evaluate`.

Everything is vectorised: the samples are sorted once and the bootstrap works on resampling
counts over that fixed order, so 200 resamples of 20k samples take a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from miaudit.errors import AttackError
from miaudit.progress import progress_bar

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

# bootstrap chunks hold at most this many resample-by-sample counts at once (memory bound)
_CHUNK_CELLS = 4_000_000


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
    order = np.argsort(-s, kind="stable")  # -NaN is NaN: argsort puts it last
    ss = s[order]
    nan = np.isnan(ss)
    change = (ss[1:] != ss[:-1]) & ~(nan[1:] & nan[:-1])
    gid = np.concatenate(([0], np.cumsum(change)))
    starts = np.concatenate(([0], np.flatnonzero(change) + 1))
    return order, gid, starts


def _cumulative(s: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cumulative true/false positives at each distinct score (descending) and the scores."""
    order, gid, starts = _groups(s)
    mo = m[order]
    n_groups = starts.size
    pos = np.bincount(gid, weights=mo, minlength=n_groups).astype(np.int64)
    cnt = np.bincount(gid, minlength=n_groups).astype(np.int64)
    values = s[order][starts]
    return np.cumsum(pos), np.cumsum(cnt - pos), values


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
    return twice_area / (2.0 * tps[..., -1] * fps[..., -1])


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
    if not 0.0 < recall <= 1.0:
        raise AttackError(f"recall must be in (0, 1], got {recall}")
    s, m = _check(scores, members)
    tps, fps, _ = _cumulative(s, m)
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


def _layout(s: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct score (descending, NaN last): how many members / non-members have a
    score >= it, counting positions in the descending sort order of each class."""
    order, gid, _ = _groups(s)
    mo = m[order]
    g_range = np.arange(int(gid[-1]) + 1)
    end1 = np.searchsorted(gid[mo], g_range, side="right")
    end0 = np.searchsorted(gid[~mo], g_range, side="right")
    return end1, end0


def _resampled_stats(
    end1: np.ndarray,
    end0: np.ndarray,
    counts1: np.ndarray,
    counts0: np.ndarray,
    fprs: Sequence[float],
) -> tuple[np.ndarray, np.ndarray]:
    """AUC [B] and TPR@FPR [B, F] of B resamples given as copy counts per sample.

    ``counts1[b, j]``: copies of the j-th member (descending score order) in resample b;
    ``counts0`` likewise for non-members. The ROC of a resample is read off cumulative sums
    of the counts at each distinct score, so no resample is sorted again.
    """
    b = counts1.shape[0]
    zero = np.zeros((b, 1), np.int64)
    tps = np.concatenate((zero, np.cumsum(counts1, axis=1)), axis=1)[:, end1]
    fps = np.concatenate((zero, np.cumsum(counts0, axis=1)), axis=1)[:, end0]
    aucs = _auc_from_cumulative(tps, fps)
    fpr = fps / fps[:, -1:]
    tprs = np.empty((b, len(fprs)))
    for j, f in enumerate(fprs):
        tprs[:, j] = np.where(fpr <= f, tps, 0).max(axis=1) / tps[:, -1]
    return aucs, tprs


def _bootstrap(
    s: np.ndarray,
    m: np.ndarray,
    fprs: Sequence[float],
    n_bootstrap: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Stratified bootstrap: AUC [B] and TPR@FPR [B, len(fprs)] over resampled samples.

    Members and non-members are resampled separately (with replacement, same counts), so
    every resample keeps both classes. The sort order is fixed; a resample only changes how
    many copies of each sample there are (see :func:`_resampled_stats`).
    """
    end1, end0 = _layout(s, m)
    n1, n0 = int(m.sum()), int((~m).sum())
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_CELLS // s.size)
    aucs = np.empty(n_bootstrap)
    tprs = np.empty((n_bootstrap, len(fprs)))

    def counts(b: int, n: int) -> np.ndarray:
        idx = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        return np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)

    # One update per chunk of resamples; the bar draws no numbers from `rng`.
    with progress_bar(n_bootstrap, "bootstrap", "resample", quick=True) as bar:
        for lo in range(0, n_bootstrap, chunk):
            b = min(chunk, n_bootstrap - lo)
            stats = _resampled_stats(end1, end0, counts(b, n1), counts(b, n0), fprs)
            aucs[lo : lo + b], tprs[lo : lo + b] = stats
            bar.update(b)
    return aucs, tprs


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
    ``threshold``. CIs are percentile intervals of a stratified, seeded bootstrap over samples
    (``None`` when ``n_bootstrap`` is 0). ``threshold`` must come from public/shadow data
    (see :func:`best_accuracy_threshold`); balanced accuracy is ``None`` without it.
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
    n1, n0 = int(m.sum()), int((~m).sum())
    tps, fps, _ = _cumulative(s, m)
    fpr = np.concatenate(([0], fps)) / n0
    tpr = np.concatenate(([0], tps)) / n1
    auc_ci: list[float] | None = None
    tpr_ci: dict[str, list[float] | None] = {_key(f): None for f in fprs}
    if n_bootstrap > 0:
        boot_auc, boot_tpr = _bootstrap(s, m, fprs, n_bootstrap, seed)
        auc_ci = _interval(boot_auc, confidence)
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
        "precision_at_recall": {_key(r): precision_at_recall(s, m, r) for r in recalls},
        "balanced_accuracy": bal,
        "threshold": None if threshold is None else float(threshold),
    }
